"""Parquet / Hugging Face ``datasets`` <-> WeNet shards, and any input -> Parquet.

* :func:`import_parquet`: Parquet files or a ``save_to_disk`` directory
  (:mod:`wenet_lhotse.sources.parquet`) -> WeNet tar shards (``make_shard_list.py``
  layout: ``key.txt``, ``key.<audio suffix>``, then ``key.<column>`` for every other
  column) and their shard list. The audio bytes go in as stored in the row, byte for
  byte, under the suffix their own signature gives (:func:`~wenet_lhotse.formats.codec.
  audio_format`: WAV, FLAC, OGG/Vorbis, Opus, MP3, M4A, WMA; the row's ``audio.path``
  is a hint only and is kept as the ``key.audio_path`` member); a row whose bytes are
  none of these is a bad row (WeNet could not read the member). ``key.txt`` holds the
  text's bytes exactly (WeNet strips it when training; the shard reader keeps the
  verbatim text for the way back). Other columns: strings and bytes as they are, any
  other value as JSON text (so in shards they read back as strings).
* :func:`export_parquet`: any input (raw list, shards, cuts, Shar, Parquet) -> one
  Parquet file with columns ``id``, ``audio`` (Hugging Face's ``{bytes, path}`` struct,
  so ``datasets.Dataset.from_parquet`` reads it as ``Audio(decode=False)``), ``text``,
  ``duration``, then the cuts' other fields (``cut.custom``) as columns. Audio bytes: a
  whole audio file or in-memory audio (shards, Shar, Parquet) as stored; a segment of a
  file, encoded as 16-bit WAV. ``audio.path`` is the kept ``audio_path`` or
  ``<id>.<suffix>``.

So Parquet -> shards -> Parquet and Parquet -> Shar (``--audio-format copy``) -> Parquet
keep every audio byte, text and column (tested). Member names are ids, which the reader
has checked (safe relative names, unique in the input). Both writers are atomic (a
killed run leaves no partial file). A bad row is named (file, row) or, with
``strict=False``, skipped and counted.
"""

from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Tuple

from lhotse.cut import Cut

from wenet_lhotse.errors import WenetDataError
from wenet_lhotse.formats.audio import encode_pcm16_wav
from wenet_lhotse.formats.codec import audio_format
from wenet_lhotse.formats.layout import AUDIO_SUFFIXES, LHOTSE_INTERNAL_CUSTOM, cut_text
from wenet_lhotse.io.access import short
from wenet_lhotse.io.policy import ReadPolicy
from wenet_lhotse.io.streams import atomic_output
from wenet_lhotse.sources.parquet import AUDIO_PATH, LazyParquetCuts, ParquetColumns, _pyarrow

#: Supervision ``custom`` key of the shard reader's verbatim (unstripped) text.
VERBATIM = "txt_verbatim"
#: Columns :func:`export_parquet` writes itself.
OWN_COLUMNS = ("id", "audio", "text")


def whole_bytes(cut: Cut) -> Optional[Tuple[bytes, Optional[str]]]:
    """``(bytes, suffix or None)`` of a cut that is a whole in-memory or local file
    recording (the suffix from the bytes' signature, the kept ``audio_path`` or file
    name as a hint); None otherwise."""
    src = cut.recording.sources[0] if cut.has_recording else None
    whole = (src is not None and len(cut.recording.sources) == 1 and not
             cut.recording.transforms and abs(cut.start) < 1e-9
             and abs(cut.duration - cut.recording.duration) < 1e-6)
    if not whole:
        return None
    hint = (cut.custom or {}).get(AUDIO_PATH)
    if src.type == "memory":
        data = bytes(src.source)
    elif src.type == "file" and os.path.exists(src.source):
        data, hint = Path(src.source).read_bytes(), hint or str(src.source)
    else:
        return None
    return data, audio_format(data, hint if isinstance(hint, str) else None)


def audio_bytes(cut: Cut) -> Tuple[bytes, str]:
    """``(bytes, suffix)`` of a cut's audio: the stored bytes when the cut is a whole
    in-memory or local file recording (suffix ``bin`` when no format is recognised),
    else 16-bit WAV of its samples."""
    found = whole_bytes(cut)
    if found is not None:
        return found[0], found[1] or "bin"
    return encode_pcm16_wav(cut.load_audio(), cut.sampling_rate), "wav"


def text_verbatim(cut: Cut) -> Optional[str]:
    """The cut's text as stored: the shard reader's unstripped text when it kept one
    (one supervision), else :func:`~wenet_lhotse.formats.layout.cut_text`."""
    sups = cut.supervisions
    if len(sups) == 1 and sups[0].custom and isinstance(sups[0].custom.get(VERBATIM), str):
        return sups[0].custom[VERBATIM]
    return cut_text(cut)


def _extras(cut: Cut) -> Dict[str, Any]:
    return {k: v for k, v in (cut.custom or {}).items() if k not in LHOTSE_INTERNAL_CUSTOM}


def _member_payload(name: str, value: Any, where: str) -> bytes:
    if not name or "." in name or "/" in name or name in AUDIO_SUFFIXES or name == "txt" \
            or any(c < " " for c in name):
        raise WenetDataError(f"column {short(name)} cannot be a tar member suffix "
                             "(rename or drop the column)", where, kind="invalid")
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    return json.dumps(value, ensure_ascii=False, default=str).encode("utf-8")


def shard_members(cut: Cut, where: str) -> List[Tuple[str, bytes]]:
    """The tar members of one Parquet cut: ``key.txt``, ``key.<format>``, ``key.<col>``.
    A :class:`WenetDataError` naming ``where`` and the key for audio that is no format
    WeNet's shards hold."""
    found = whole_bytes(cut)
    if found is None or found[1] is None:
        head = bytes(found[0][:8]) if found else b""
        raise WenetDataError(
            f"audio format not recognised from its bytes ({head!r}...): WeNet shards hold "
            f"{', '.join(sorted(AUDIO_SUFFIXES))}", where, member=cut.id, kind="bad_audio")
    data, ext = found
    members = [(f"{cut.id}.txt", (text_verbatim(cut) or "").encode("utf-8")),
               (f"{cut.id}.{ext}", data)]
    members += [(f"{cut.id}.{k}", _member_payload(k, v, where)) for k, v in _extras(cut).items()]
    return members


def _shard_tar(members: List[Tuple[str, bytes]], path: str) -> None:
    with atomic_output(path, "wb") as f, tarfile.open(fileobj=f, mode="w") as tar:
        for name, payload in members:
            info = tarfile.TarInfo(name)  # mtime 0, mode 0644, as make_shard_list.py
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))


def import_parquet(paths: Iterable[str], out_dir: str, *, shard_size: int = 1000,
                   columns: ParquetColumns = ParquetColumns(),
                   policy: Optional[ReadPolicy] = None) -> Tuple[Path, int]:
    """Parquet / ``save_to_disk`` input -> WeNet shards in ``out_dir`` plus
    ``out_dir/shards.list``; returns ``(list path, utterances written)``. A bad row
    raises or is skipped as ``policy`` says (default: raises).
    Memory: one tar's members (``shard_size`` rows) and one record batch."""
    policy = (policy or ReadPolicy())
    paths = [str(p) for p in paths]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tars: List[str] = []
    buf: List[Tuple[str, bytes]] = []
    rows = n = 0

    def flush() -> None:
        path = str((out / f"shards_{len(tars):09d}.tar").resolve())
        _shard_tar(buf, path)
        tars.append(path)
        buf.clear()

    where = paths[0] if len(paths) == 1 else ", ".join(paths)
    for cut in LazyParquetCuts(paths, columns, policy=policy):
        try:
            buf.extend(shard_members(cut, where))
        except WenetDataError as err:
            if err.kind != "bad_audio":
                raise  # a column that cannot be a member: every row would fail
            policy.handle(err)
            continue
        n += 1
        rows += 1
        if rows >= shard_size:
            flush()
            rows = 0
    if buf:
        flush()
    list_path = out / "shards.list"
    with atomic_output(list_path, "w", encoding="utf-8") as f:
        f.write("".join(t + "\n" for t in tars))
    return list_path, n


def _row(cut: Cut) -> Dict[str, Any]:
    data, ext = audio_bytes(cut)
    extras = _extras(cut)
    path = extras.pop(AUDIO_PATH, None)
    row = {"id": cut.id, "audio": {"bytes": data, "path": path or f"{cut.id}.{ext}"},
           "text": text_verbatim(cut), "duration": float(cut.duration)}
    row.update({k: v for k, v in extras.items() if k not in OWN_COLUMNS})
    return row


def export_parquet(cuts: Iterable[Cut], out_path: str, *, rows_per_group: int = 256) -> int:
    """Cuts -> one Parquet file (``id``, ``audio`` {bytes, path}, ``text``, ``duration``,
    then the ``cut.custom`` fields, their types taken from the first row group: a field
    that appears only later is an error naming the cut); returns the number of rows."""
    pa = _pyarrow()
    base = [("id", pa.string()),
            ("audio", pa.struct([("bytes", pa.binary()), ("path", pa.string())])),
            ("text", pa.string()), ("duration", pa.float64())]
    n = 0
    state: Dict[str, Any] = {}
    with atomic_output(out_path, "wb") as f:
        rows: List[Dict[str, Any]] = []

        def flush() -> None:
            if "writer" not in state:
                names = [name for name, _ in base]
                extra = [k for r in rows for k in r if k not in names]
                extra = list(dict.fromkeys(extra))
                inferred = pa.Table.from_pylist([{k: r.get(k) for k in extra} for r in rows])
                state["schema"] = pa.schema([*base, *[inferred.schema.field(k) for k in extra]]
                                            if extra else base)
                state["writer"] = pa.parquet.ParquetWriter(f, state["schema"])
            names = set(state["schema"].names)
            for r in rows:
                new = [k for k in r if k not in names]
                if new:
                    raise ValueError(f"cut {r['id']!r}: field {new[0]!r} is not among the "
                                     f"columns of the first {rows_per_group} rows")
            state["writer"].write_table(pa.Table.from_pylist(rows, schema=state["schema"]))
            rows.clear()

        for cut in cuts:
            rows.append(_row(cut))
            n += 1
            if len(rows) >= rows_per_group:
                flush()
        if rows or n == 0:
            flush()
        state["writer"].close()
    return n

