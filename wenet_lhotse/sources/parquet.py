"""Parquet files and Hugging Face ``datasets`` directories as lazy Lhotse cuts.

Input (``type: parquet`` sources, ``wenet-lhotse parquet import``):

* Parquet files (``*.parquet``), or a directory of them;
* a directory written by ``datasets``' ``save_to_disk`` (``state.json`` and
  ``data-*.arrow`` files: Arrow IPC streams), read with ``pyarrow`` alone.

Columns (names configurable, :class:`ParquetColumns`): audio -- raw bytes (``binary``)
or Hugging Face's ``Audio(decode=False)`` struct ``{bytes, path}``; text (optional:
speech-only data without it); id (optional: else ``<file stem>-<row>``). Each row
becomes a cut with an in-memory recording of the row's bytes, exactly as stored (WAV,
FLAC, ...: :func:`~wenet_lhotse.formats.audio.recording_from_bytes` reads the header),
and one supervision with the text. Rows are read one record batch at a time.

Different from Lhotse: ``CutSet.from_huggingface_dataset`` needs ``datasets`` and
decodes audio through its ``Audio`` feature (``datasets`` 5 decodes with torchcodec);
here nothing is decoded to build cuts, and the bytes stay as stored, so
``export_parquet`` writes them back unchanged (a lossless round trip). A bad row (no
audio bytes, unreadable audio header, a non-string text) is one
:class:`~wenet_lhotse.errors.WenetDataError` naming the file and ``row N`` (0-based), or
skipped and counted in fault-tolerant mode. Needs ``pyarrow`` (extra ``arrow``).
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

from lhotse import SupervisionSegment
from lhotse.cut import Cut
from lhotse.lazy import Dillable

from wenet_lhotse.errors import SkipReport, WenetDataError, reraise_worker_death
from wenet_lhotse.formats.audio import recording_from_bytes
from wenet_lhotse.io.policy import PolicyHolder, ReadPolicy


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


def arrow_files(path: str) -> List[Tuple[str, str]]:
    """``[(file, "parquet" | "arrow")]`` of a Parquet file, a directory of Parquet files,
    or a ``save_to_disk`` directory (its ``data-*.arrow`` shards, in order)."""
    if os.path.isdir(path):
        arrow = sorted(glob.glob(os.path.join(path, "*.arrow")))
        if arrow and os.path.exists(os.path.join(path, "state.json")):
            return [(f, "arrow") for f in arrow]
        files = sorted(glob.glob(os.path.join(path, "**", "*.parquet"), recursive=True))
        if not files:
            raise WenetDataError("no *.parquet files and not a datasets save_to_disk "
                                 "directory", path, kind="missing_file")
        return [(f, "parquet") for f in files]
    if not os.path.exists(path):
        raise WenetDataError("no such file", path, kind="missing_file")
    return [(path, "arrow" if path.endswith(".arrow") else "parquet")]


def record_batches(path: str, kind: str, columns: Sequence[str]) -> Iterator[Any]:
    """The file's record batches (only ``columns`` that exist)."""
    pa = _pyarrow()
    if kind == "parquet":
        pf = pa.parquet.ParquetFile(path)
        names = [c for c in columns if c in pf.schema_arrow.names]
        yield from pf.iter_batches(batch_size=256, columns=names)
        return
    with pa.memory_map(path) as src:
        reader = pa.ipc.open_stream(src)
        for batch in reader:
            yield batch.select([c for c in columns if c in batch.schema.names])


def _audio_bytes(value: Any) -> Optional[bytes]:
    if isinstance(value, dict):
        value = value.get("bytes")
    return bytes(value) if isinstance(value, (bytes, bytearray, memoryview)) else None


def row_cut(row: Dict[str, Any], cols: ParquetColumns, where: str, index: int,
            stem: str) -> Cut:
    """One row as a cut (in-memory recording of the row's bytes, one supervision)."""
    def bad(msg: str, kind: str = "invalid") -> WenetDataError:
        return WenetDataError(f"row {index}: {msg}", where, kind=kind)

    if cols.audio not in row:
        raise bad(f"no column {cols.audio!r} (set the audio column name)", "missing_field")
    data = _audio_bytes(row[cols.audio])
    if not data:
        raise bad(f"column {cols.audio!r} holds no audio bytes", "missing_audio")
    key = row.get(cols.id) if cols.id else None
    key = str(key) if key not in (None, "") else f"{stem}-{index:08d}"
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
    return cut


class LazyParquetCuts(PolicyHolder, Dillable):
    """Iterates the cuts of Parquet files / ``save_to_disk`` directories lazily; a bad
    row is raised or skipped as ``policy`` says (the old ``strict``/``skip_report``
    make one)."""

    def __init__(self, paths: Sequence[str], columns: ParquetColumns = ParquetColumns(),
                 strict: Optional[bool] = None, skip_report: Optional[SkipReport] = None,
                 *, policy: Optional[ReadPolicy] = None) -> None:
        self.paths = [str(p) for p in paths]
        self.columns = columns
        self.policy = ReadPolicy.of(policy, strict=strict, skip_report=skip_report)

    def __iter__(self) -> Iterator[Cut]:
        cols = self.columns
        names = [c for c in (cols.audio, cols.text, cols.id) if c]
        for path in self.paths:
            for file, kind in arrow_files(path):
                stem = os.path.splitext(os.path.basename(file))[0]
                index = 0
                for batch in record_batches(file, kind, names):
                    for row in batch.to_pylist():
                        try:
                            yield row_cut(row, cols, file, index, stem)
                        except WenetDataError as err:
                            self.policy.handle(err)
                        index += 1

    def __len__(self) -> int:
        return sum(_rows(f, k) for p in self.paths for f, k in arrow_files(p))


def _rows(file: str, kind: str) -> int:
    pa = _pyarrow()
    if kind == "parquet":
        return pa.parquet.ParquetFile(file).metadata.num_rows
    return sum(b.num_rows for b in record_batches(file, kind, []))
