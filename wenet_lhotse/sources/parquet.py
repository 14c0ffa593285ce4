"""Parquet files and Hugging Face ``datasets`` directories as lazy Lhotse cuts.

Input (``type: parquet`` sources, ``wenet-lhotse parquet-import``, and the tools, which
detect a Parquet file by its ``PAR1`` magic and a ``save_to_disk`` directory by its
``state.json``):

* Parquet files (``*.parquet``), or a directory of them;
* a directory written by ``datasets``' ``save_to_disk`` (``state.json`` and
  ``data-*.arrow`` files: Arrow IPC streams), read with ``pyarrow`` alone.

Columns (names configurable, :class:`ParquetColumns`): audio -- raw bytes (``binary``)
or Hugging Face's ``Audio(decode=False)`` struct ``{bytes, path}``; text (optional:
speech-only data without it); id (optional: else ``<file stem>-<row>``). Each row
becomes a cut with an in-memory recording of the row's bytes, exactly as stored (WAV,
FLAC, OGG/Vorbis, Opus, MP3, ...: :func:`~wenet_lhotse.formats.audio.recording_from_bytes`
reads the header), and one supervision with the text exactly as stored (no stripping).
Nothing is lost on the way: the struct's ``path`` goes to ``cut.custom["audio_path"]``
and every other column to ``cut.custom[<column>]`` (null values left out), which the
writers (:mod:`wenet_lhotse.convert.parquet`, Shar) store back.

Bounded memory: rows are read lazily, one row group at a time in record batches of at
most :data:`BATCH_ROWS` rows and about :data:`BATCH_BYTES` bytes (a ``type: parquet``
training source never holds more). Before a row group is read its column chunks are
checked against the read policy's caps, as tar members are
(:mod:`~wenet_lhotse.formats.checks`): the decompressed bytes per row (at most
``max_member_bytes``, 1 GiB) and the decompression ratio (at most
``$WENET_LHOTSE_MAX_MEMBER_RATIO``, 200, once past 64 MiB): a 6 KB zstd file
claiming 200 MB of zeros is refused in one line naming the file, row group and limit
before anything is decompressed. A file pyarrow cannot read (cut short, not Parquet,
damaged pages) is one line naming it.

Different from Lhotse: ``CutSet.from_huggingface_dataset`` needs ``datasets`` and
decodes audio through its ``Audio`` feature; here nothing is decoded to build cuts. A
bad row (no audio bytes, unreadable audio, a non-string text, an unsafe or repeated
id: ids become tar member names) is one :class:`~wenet_lhotse.errors.WenetDataError`
naming the file and ``row N`` (0-based), or skipped and counted in fault-tolerant
mode. Needs ``pyarrow`` (extra ``arrow``).
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

from lhotse import SupervisionSegment
from lhotse.cut import Cut
from lhotse.lazy import Dillable

from wenet_lhotse.errors import WenetDataError, reraise_worker_death
from wenet_lhotse.formats.audio import recording_from_bytes
from wenet_lhotse.formats.checks import (
    RATIO_FLOOR_BYTES,
    key_problem,
    max_member_bytes,
    max_member_ratio,
)
from wenet_lhotse.formats.keyset import KeySet
from wenet_lhotse.io.access import short
from wenet_lhotse.io.policy import PolicyHolder, ReadPolicy
from wenet_lhotse.sources.meta_cut import MetaCut

#: Most rows in one record batch, and the decompressed bytes one batch aims at.
BATCH_ROWS = 256
BATCH_BYTES = 64 << 20
#: ``cut.custom`` entry holding the ``path`` of an ``{bytes, path}`` audio struct.
AUDIO_PATH = "audio_path"
#: Errors pyarrow raises for a file it cannot read.
_READ_ERRORS = (OSError, ValueError, EOFError)


def _pyarrow():
    try:
        import pyarrow
        import pyarrow.ipc  # noqa: F401
        import pyarrow.parquet  # noqa: F401
    except ImportError:
        raise ImportError("Parquet / Arrow sources need pyarrow: pip install pyarrow "
                          "(or, in the wenet-lhotse clone: pip install -e '.[arrow]')") from None
    return pyarrow


@dataclass(frozen=True)
class ParquetColumns:
    """Column names: ``audio`` (bytes or ``{bytes, path}``), ``text`` (None: no
    transcripts), ``id`` (None or missing: ``<file stem>-<row>``)."""

    audio: str = "audio"
    text: Optional[str] = "text"
    id: Optional[str] = "id"


def is_arrow_dir(path: str) -> bool:
    """A ``datasets`` ``save_to_disk`` directory (``state.json`` and ``*.arrow``)."""
    return (os.path.isdir(path) and os.path.exists(os.path.join(path, "state.json"))
            and bool(glob.glob(os.path.join(path, "*.arrow"))))


def arrow_files(path: str) -> List[Tuple[str, str]]:
    """``[(file, "parquet" | "arrow")]`` of a Parquet file, a directory of Parquet files,
    or a ``save_to_disk`` directory (its ``data-*.arrow`` shards, in order)."""
    if os.path.isdir(path):
        if is_arrow_dir(path):
            return [(f, "arrow") for f in sorted(glob.glob(os.path.join(path, "*.arrow")))]
        files = sorted(glob.glob(os.path.join(path, "**", "*.parquet"), recursive=True))
        if not files:
            raise WenetDataError("no *.parquet files and not a datasets save_to_disk "
                                 "directory", path, kind="missing_file")
        return [(f, "parquet") for f in files]
    if not os.path.exists(path):
        raise WenetDataError("no such file", path, kind="missing_file")
    return [(path, "arrow" if path.endswith(".arrow") else "parquet")]


def _unreadable(path: str, err: BaseException, where: str = "") -> WenetDataError:
    what = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    fmt = "Arrow" if path.endswith(".arrow") else "Parquet"
    return WenetDataError(f"{where}cannot read as {fmt}: {short(what, 120)[1:-1]}", path,
                          kind="format")


def check_row_group(meta: Any, path: str, group: int, policy: ReadPolicy) -> int:
    """Check row group ``group`` of a Parquet file's metadata against the policy's caps
    before reading it (see the module doc); returns its decompressed bytes."""
    rg = meta.row_group(group)
    rows = max(1, rg.num_rows)
    cap, ratio = max_member_bytes(policy.max_member_bytes), max_member_ratio()
    total = 0
    for i in range(rg.num_columns):
        col = rg.column(i)
        raw, packed = col.total_uncompressed_size, max(1, col.total_compressed_size)
        total += raw
        where = f"row group {group}, column {col.path_in_schema!r}: "
        if raw / rows > cap:
            raise WenetDataError(
                f"{where}{raw} decompressed bytes for {rg.num_rows} rows, over the cap of "
                f"{cap} bytes per row (WENET_LHOTSE_MAX_MEMBER_BYTES)", path, kind="too_large")
        if raw > RATIO_FLOOR_BYTES and raw / packed > ratio:
            raise WenetDataError(
                f"{where}{packed} bytes decompress to {raw} ({raw / packed:.0f}x), over the "
                f"ratio cap of {ratio:g} (WENET_LHOTSE_MAX_MEMBER_RATIO)", path,
                kind="too_large")
    return total


def record_batches(path: str, kind: str, columns: Optional[Sequence[str]] = None,
                   policy: Optional[ReadPolicy] = None) -> Iterator[Any]:
    """The file's record batches (only ``columns`` that exist; None: all), row group by
    row group, each checked first (:func:`check_row_group`). A file pyarrow cannot read
    is a :class:`WenetDataError` naming it (and the row group)."""
    return (batch for _, batch in group_batches(path, kind, columns, policy))


def group_batches(path: str, kind: str, columns: Optional[Sequence[str]] = None,
                  policy: Optional[ReadPolicy] = None, groups: Optional[Sequence[int]] = None
                  ) -> Iterator[Tuple[int, Any]]:
    """``(row group, record batch)`` of :func:`record_batches` (an ``.arrow`` stream:
    its record batch index as the group), only ``groups`` when given."""
    pa = _pyarrow()
    policy = policy or ReadPolicy()
    if kind == "arrow":
        for group, batch in enumerate(_arrow_batches(pa, path, columns)):
            if groups is None or group in groups:
                yield group, batch
        return
    try:
        pf = pa.parquet.ParquetFile(path, pre_buffer=False, buffer_size=1 << 20)
        names = [c for c in (columns if columns is not None else pf.schema_arrow.names)
                 if c in pf.schema_arrow.names]
        meta = pf.metadata
    except _READ_ERRORS as err:
        raise _unreadable(path, err) from None
    for group in range(meta.num_row_groups) if groups is None else groups:
        size = check_row_group(meta, path, group, policy)
        rows = meta.row_group(group).num_rows
        per_batch = max(1, min(BATCH_ROWS, BATCH_BYTES * max(1, rows) // max(1, size)))
        try:
            for batch in pf.iter_batches(batch_size=per_batch, row_groups=[group],
                                         columns=names, use_threads=False):
                yield group, batch
        except _READ_ERRORS as err:
            raise _unreadable(path, err, f"row group {group}: ") from None


def _arrow_batches(pa: Any, path: str, columns: Optional[Sequence[str]]) -> Iterator[Any]:
    """A ``save_to_disk`` shard (an Arrow IPC stream, memory-mapped: batches are views
    of the file, not copies)."""
    try:
        with pa.memory_map(path) as src:
            reader = pa.ipc.open_stream(src)
            for batch in reader:
                yield batch if columns is None else batch.select(
                    [c for c in columns if c in batch.schema.names])
    except _READ_ERRORS as err:
        raise _unreadable(path, err) from None


def _audio(value: Any) -> Tuple[Optional[bytes], Optional[str]]:
    path = None
    if isinstance(value, dict):
        value, path = value.get("bytes"), value.get("path")
    data = bytes(value) if isinstance(value, (bytes, bytearray, memoryview)) else None
    return data, path if isinstance(path, str) and path else None


def row_cut(row: Dict[str, Any], cols: ParquetColumns, where: str, index: int,
            stem: str, policy: Optional[ReadPolicy] = None) -> Cut:
    """One row as a cut (in-memory recording of the row's bytes, one supervision with
    the text as stored, every other column in ``cut.custom``)."""
    def bad(msg: str, kind: str = "invalid") -> WenetDataError:
        return WenetDataError(f"row {index}: {msg}", where, kind=kind)

    if cols.audio not in row:
        raise bad(f"no column {cols.audio!r} (set the audio column name)", "missing_field")
    data, audio_path = _audio(row[cols.audio])
    if not data:
        raise bad(f"column {cols.audio!r} holds no audio bytes", "missing_audio")
    cap = max_member_bytes((policy or ReadPolicy()).max_member_bytes)
    if len(data) > cap:
        raise bad(f"{len(data)} bytes of audio, over the cap of {cap} bytes "
                  "(WENET_LHOTSE_MAX_MEMBER_BYTES)", "too_large")
    key = row.get(cols.id) if cols.id else None
    key = str(key) if key not in (None, "") else f"{stem}-{index:08d}"
    why = key_problem(key)
    if why is not None:  # ids become tar member and file names
        raise bad(f"unsafe id {short(key)}: {why}", "unsafe_key")
    try:
        rec = recording_from_bytes(data, key)
    except Exception as err:  # noqa: BLE001 - any decoder error is this row's bad audio
        reraise_worker_death(err)  # but not torch's killed-worker error (issue 23)
        raise bad(f"unreadable audio: {err}", "bad_audio") from None
    cut = rec.to_cut()
    text = row.get(cols.text) if cols.text else None
    if text is not None and not isinstance(text, str):
        raise bad(f"column {cols.text!r} is not a string", "invalid")
    if text is not None:
        cut.supervisions = [SupervisionSegment(id=key, recording_id=key, start=0.0,
                                               duration=rec.duration, text=text)]
    custom = {k: v for k, v in row.items()
              if k not in (cols.audio, cols.text, cols.id) and v is not None}
    if audio_path is not None:
        custom.setdefault(AUDIO_PATH, audio_path)
    if custom:
        cut.custom = custom
    return cut


class LazyParquetCuts(PolicyHolder, Dillable):
    """Iterates the cuts of Parquet files / ``save_to_disk`` directories lazily; a bad
    row is raised or skipped as ``policy`` says. A file that cannot be read is one such
    error (its remaining rows are not read); a repeated id within one iteration is a bad
    row (``duplicate``)."""

    def __init__(self, paths: Sequence[str], columns: ParquetColumns = ParquetColumns(),
                 *, policy: Optional[ReadPolicy] = None, light: bool = False) -> None:
        self.paths = [str(p) for p in paths]
        self.columns = columns
        self.policy = (policy or ReadPolicy())
        self.light = light  # yield ParquetRowCuts: metadata only, audio read back later

    def __iter__(self) -> Iterator[Cut]:
        seen = KeySet()
        for path in self.paths:
            for file, kind in arrow_files(path):
                try:
                    yield from self._file_cuts(file, kind, seen)
                except WenetDataError as err:  # the file (or a row group) cannot be read
                    self.policy.handle(err)

    def _file_cuts(self, file: str, kind: str, seen: KeySet) -> Iterator[Cut]:
        cols = self.columns
        stem = os.path.splitext(os.path.basename(file))[0]
        index, last, offset = 0, -1, 0
        for group, batch in group_batches(file, kind, None, self.policy):
            offset = 0 if group != last else offset
            last = group
            for row in batch.to_pylist():
                try:
                    cut = row_cut(row, cols, file, index, stem, self.policy)
                    if not seen.add(cut.id):
                        raise WenetDataError(f"row {index}: duplicate id {short(cut.id)} "
                                             "(seen earlier in this input)", file,
                                             kind="duplicate")
                    yield ParquetRowCut(cut, self, (file, kind, group, offset, index)) \
                        if self.light else cut
                except WenetDataError as err:
                    self.policy.handle(err)
                index += 1
                offset += 1

    def __len__(self) -> int:
        return sum(_rows(f, k) for p in self.paths for f, k in arrow_files(p))


def _rows(file: str, kind: str) -> int:
    pa = _pyarrow()
    try:
        if kind == "parquet":
            return pa.parquet.ParquetFile(file).metadata.num_rows
        return sum(b.num_rows for b in _arrow_batches(pa, file, []))
    except _READ_ERRORS as err:
        raise _unreadable(file, err) from None


class ParquetRowCut(MetaCut):
    """A Parquet row's cut without its audio (what a map-style sampler holds: id,
    duration, sampling rate, texts): :meth:`materialize` reads the row back, from the
    row group of the file it came from, when its batch is emitted. Each process keeps
    the last record batch it read (:data:`_GROUP_CACHE`), so rows read in file order
    cost one read per batch; a shuffled order streams the row group up to the row for
    each cut (memory: one record batch)."""

    __slots__ = ()

    def __init__(self, cut: Cut, source: LazyParquetCuts,
                 where: Tuple[str, str, int, int, int]) -> None:
        self.id = cut.id
        self.start = 0.0
        self.duration = cut.duration
        self.sampling_rate = cut.sampling_rate
        self._sups = tuple((s.text, s.speaker, s.language) for s in cut.supervisions)
        self._line = where  # (file, kind, row group, row in the group, row in the file)
        self._extra = (source.columns, source.policy)
        self._tags = None
        self._where = (where[0], where[4])

    def materialize(self) -> Cut:
        file, kind, group, offset, index = self._line
        cols, policy = self._extra
        stem = os.path.splitext(os.path.basename(file))[0]
        cut = row_cut(_group_row(file, kind, group, offset, policy), cols, file, index, stem,
                      policy)
        if self._tags:
            cut.custom = {**self._tags, **(cut.custom or {})}
        return cut


#: ``(file, kind, row group, first row in the group) -> rows`` of the record batch read
#: last in this process (at most :data:`BATCH_ROWS` rows, about :data:`BATCH_BYTES`).
_GROUP_CACHE: Dict[Tuple[str, str, int, int], List[Dict[str, Any]]] = {}


def _group_row(file: str, kind: str, group: int, offset: int,
               policy: ReadPolicy) -> Dict[str, Any]:
    """Row ``offset`` of row group ``group``: from the cached record batch, else read by
    streaming the group's batches up to it (only that batch is kept)."""
    for (f, k, g, start), rows in _GROUP_CACHE.items():
        if (f, k, g) == (file, kind, group) and start <= offset < start + len(rows):
            return rows[offset - start]
    start = 0
    for _, batch in group_batches(file, kind, None, policy, [group]):
        if start <= offset < start + batch.num_rows:
            rows = batch.to_pylist()
            _GROUP_CACHE.clear()  # one batch at a time
            _GROUP_CACHE[(file, kind, group, start)] = rows
            return rows[offset - start]
        start += batch.num_rows
    raise WenetDataError(f"row group {group} has no row {offset} (the file changed since "
                         "it was read)", file, kind="format")
