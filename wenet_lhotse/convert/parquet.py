"""Parquet / Hugging Face ``datasets`` <-> WeNet shards, and any input -> Parquet.

* :func:`import_parquet`: Parquet files or a ``save_to_disk`` directory
  (:mod:`wenet_lhotse.sources.parquet`) -> WeNet tar shards (``make_shard_list.py``
  layout: ``key.txt`` then ``key.<wav|flac|...>``) and their shard list. The audio bytes
  go in as stored in the row, byte for byte (the shard writer of
  :mod:`~wenet_lhotse.formats.shard_writer` re-encodes in-memory audio as 16-bit WAV;
  here the row's bytes are already a file).
* :func:`export_parquet`: any input (raw list, shards, cuts, Shar, Parquet) -> one Parquet
  file with columns ``id``, ``audio`` (Hugging Face's ``{bytes, path}`` struct, so
  ``datasets.Dataset.from_parquet`` reads it as ``Audio(decode=False)``), ``text``,
  ``duration``. Audio bytes: a whole audio file or in-memory audio (shards, Shar,
  Parquet) as stored; a segment of a file, encoded as 16-bit WAV.

So Parquet -> shards -> Parquet (and Parquet -> Parquet) keeps every audio byte and
text (tested). Both writers are atomic (a killed run leaves no partial file). A bad row
is named (file, row) or, with ``strict=False``, skipped and counted.
"""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path
from typing import Any, Iterable, List, Optional, Tuple

from lhotse.cut import Cut

from wenet_lhotse.formats.audio import encode_pcm16_wav, sniff_container
from wenet_lhotse.formats.layout import cut_text
from wenet_lhotse.io.policy import ReadPolicy
from wenet_lhotse.io.streams import atomic_output
from wenet_lhotse.sources.parquet import LazyParquetCuts, ParquetColumns, _pyarrow

EXTENSIONS = {"wav": "wav", "flac": "flac"}


def audio_bytes(cut: Cut) -> Tuple[bytes, str]:
    """``(bytes, extension)`` of a cut's audio: the stored bytes when the cut is a whole
    in-memory or local file recording, else 16-bit WAV of its samples."""
    src = cut.recording.sources[0] if cut.has_recording else None
    whole = (src is not None and abs(cut.start) < 1e-9 and
             abs(cut.duration - cut.recording.duration) < 1e-6)
    data: Optional[bytes] = None
    if whole and src.type == "memory":
        data = bytes(src.source)
    elif whole and src.type == "file" and os.path.exists(src.source):
        data = Path(src.source).read_bytes()
    if data is not None:
        ext = sniff_container(data) or os.path.splitext(str(src.source))[1].lstrip(".")
        return data, ext or "wav"
    return encode_pcm16_wav(cut.load_audio(), cut.sampling_rate), "wav"


def _shard_tar(cuts: List[Cut], path: str) -> None:
    with atomic_output(path, "wb") as f, tarfile.open(fileobj=f, mode="w") as tar:
        for cut in cuts:
            data, ext = audio_bytes(cut)
            for name, payload in ((f"{cut.id}.txt", (cut_text(cut) or "").encode("utf-8")),
                                  (f"{cut.id}.{ext}", data)):
                info = tarfile.TarInfo(name)
                info.size = len(payload)
                tar.addfile(info, io.BytesIO(payload))


def import_parquet(paths: Iterable[str], out_dir: str, *, shard_size: int = 1000,
                   columns: ParquetColumns = ParquetColumns(),
                   policy: Optional[ReadPolicy] = None) -> Tuple[Path, int]:
    """Parquet / ``save_to_disk`` input -> WeNet shards in ``out_dir`` plus
    ``out_dir/shards.list``; returns ``(list path, utterances written)``. A bad row
    raises or is skipped as ``policy`` says (default: raises)."""
    policy = (policy or ReadPolicy())
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tars: List[str] = []
    buf: List[Cut] = []
    n = 0

    def flush() -> None:
        path = str((out / f"shards_{len(tars):09d}.tar").resolve())
        _shard_tar(buf, path)
        tars.append(path)
        buf.clear()

    for cut in LazyParquetCuts(list(paths), columns, policy=policy):
        buf.append(cut)
        n += 1
        if len(buf) >= shard_size:
            flush()
    if buf:
        flush()
    list_path = out / "shards.list"
    with atomic_output(list_path, "w", encoding="utf-8") as f:
        f.write("".join(t + "\n" for t in tars))
    return list_path, n


def export_parquet(cuts: Iterable[Cut], out_path: str, *, rows_per_group: int = 256) -> int:
    """Cuts -> one Parquet file (``id``, ``audio`` {bytes, path}, ``text``, ``duration``);
    returns the number of rows."""
    pa = _pyarrow()
    schema = pa.schema([("id", pa.string()),
                        ("audio", pa.struct([("bytes", pa.binary()), ("path", pa.string())])),
                        ("text", pa.string()), ("duration", pa.float64())])
    n = 0
    with atomic_output(out_path, "wb") as f:
        writer = pa.parquet.ParquetWriter(f, schema)
        rows: List[Any] = []

        def flush() -> None:
            writer.write_table(pa.Table.from_pylist(rows, schema=schema))
            rows.clear()

        for cut in cuts:
            data, ext = audio_bytes(cut)
            rows.append({"id": cut.id, "audio": {"bytes": data, "path": f"{cut.id}.{ext}"},
                         "text": cut_text(cut), "duration": float(cut.duration)})
            n += 1
            if len(rows) >= rows_per_group:
                flush()
        if rows or n == 0:
            flush()
        writer.close()
    return n
