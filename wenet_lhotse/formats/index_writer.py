"""The shard index written in bounded memory: :class:`IndexWriter` takes one tar's rows
at a time (:class:`~wenet_lhotse.formats.tar_index.TarRows`, in list order) and appends
each column to a temporary file beside the index; :meth:`IndexWriter.close` writes the
header last and then the columns into the index (layout: :mod:`.shard_index`), atomically.

A key already seen earlier in the list is dropped from the index and recorded as bad
in its tar's record (kind ``"duplicate"``), as a streamed reader skips it; duplicates
are found on disk at the end (:mod:`.index_dedup`).

Memory while writing: one tar's rows and the running totals, whatever the corpus size
(the header's tar records wait in a temporary file too, as JSON lines); at the end, one
of 64 buckets of key hashes (16 bytes x utterances / 64). Disk: the columns twice (the
temporary files, then the index) until the rename; the temporary files are removed on
success and on error.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import tempfile
from pathlib import Path
from typing import Any, BinaryIO, Dict, List, Optional, Sequence

import numpy as np

from wenet_lhotse.formats.index_dedup import KeyHashes, copy_rows, duplicate_rows
from wenet_lhotse.formats.shard_index import _ALIGN, MAGIC, NUMERIC, STRINGS
from wenet_lhotse.formats.tar_index import TarRows
from wenet_lhotse.io.streams import atomic_output
from wenet_lhotse.io.tempfiles import temp_prefix

#: TarRows attribute of each numeric column (``tar`` and ``fmt`` are computed).
_ATTRS = {"offset": "offsets", "size": "sizes", "num_samples": "num_samples",
          "rate": "rates", "channels": "channels", "crc": "crcs"}
#: Column order in the file (the reader finds them by the header's offsets).
COLUMNS = tuple(NUMERIC) + tuple(n for s in STRINGS for n in (s, s + "_end"))


def tar_record(rows: TarRows, first: int) -> Dict[str, Any]:
    """The header's record of tar ``rows`` whose first row is ``first``."""
    return {"url": rows.url, "size": rows.size, "mtime_ns": rows.mtime_ns,
            "ctime_ns": rows.ctime_ns, "digest": rows.digest, "first": first, "count": len(rows),
            "bad": [list(b) for b in rows.bad]}


class IndexWriter:
    """Writes the index of a shard list to ``path`` one tar at a time (see the module
    doc). Use as a context manager, or call :meth:`close` (returns the bytes written)
    and :meth:`abort` on error."""

    def __init__(self, path: str, lists: Sequence[str] = ()) -> None:
        self.path = str(path)
        self.lists = [str(p) for p in lists]
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._dir = tempfile.mkdtemp(dir=Path(self.path).parent,
                                     prefix=temp_prefix(Path(self.path).name), suffix=".tmp")
        self._files: Dict[str, BinaryIO] = {
            name: open(os.path.join(self._dir, name), "wb") for name in COLUMNS + ("tars",)}
        self._dtypes = {**NUMERIC, **{s: np.uint8 for s in STRINGS},
                        **{s + "_end": np.int64 for s in STRINGS}}
        self._hashes = KeyHashes(self._dir)
        self._counts = dict.fromkeys(COLUMNS, 0)
        self._string_bytes = dict.fromkeys(STRINGS, 0)
        self.fmts: List[str] = []  # suffix codes in order of first appearance
        self.tars = 0
        self.rows = 0
        self.bad = 0

    def _append(self, name: str, values: Any) -> None:
        arr = np.asarray(values, dtype=self._dtypes[name])
        self._files[name].write(arr.tobytes())
        self._counts[name] += int(arr.size)

    def add(self, rows: TarRows) -> None:
        """Append the next tar of the list (its rows and its header record)."""
        n = len(rows)
        record = json.dumps(tar_record(rows, self.rows), ensure_ascii=False)
        self._files["tars"].write(record.encode("utf-8") + b"\n")
        self._hashes.add(rows.keys, self.rows)
        self._append("tar", np.full(n, self.tars, np.int32))
        for f in rows.fmts:
            if f not in self.fmts:
                self.fmts.append(f)
        self._append("fmt", [self.fmts.index(f) for f in rows.fmts])
        for name, attr in _ATTRS.items():
            self._append(name, getattr(rows, attr))
        for name in STRINGS:
            data = [v.encode("utf-8") for v in getattr(rows, name)]
            self._files[name].write(b"".join(data))
            self._counts[name] += sum(len(d) for d in data)
            ends = np.cumsum([len(d) for d in data], dtype=np.int64) + self._string_bytes[name]
            self._string_bytes[name] += sum(len(d) for d in data)
            self._append(name + "_end", ends)
        self.tars += 1
        self.rows += n
        self.bad += len(rows.bad)

    def close(self) -> int:
        """Write the index (header, then the columns) atomically; returns its bytes."""
        for f in self._files.values():
            f.close()
        self._hashes.close()
        try:
            self._drop_duplicates()
            tars_file = self._joined_records()
            layout: Dict[str, List[Any]] = {}
            at = 0
            for name in COLUMNS:
                nbytes = self._counts[name] * np.dtype(self._dtypes[name]).itemsize
                layout[name] = [np.dtype(self._dtypes[name]).str, at, self._counts[name]]
                at += -(-nbytes // _ALIGN) * _ALIGN
            head = json.dumps({"version": 1, "lists": self.lists, "utterances": self.rows,
                               "fmts": self.fmts, "columns": layout},
                              ensure_ascii=False).encode("utf-8")
            head = head[:-1] + b', "tars": ['
            hlen = len(head) + os.path.getsize(tars_file) + 2
            start = len(MAGIC) + 8 + hlen
            start += -start % _ALIGN
            with atomic_output(self.path, "wb") as out:
                out.write(MAGIC + struct.pack("<Q", hlen) + head)
                _copy(tars_file, out)
                out.write(b"]}")
                out.write(bytes(start - out.tell()))
                for name in COLUMNS:
                    nbytes = _copy(os.path.join(self._dir, name), out)
                    out.write(bytes(-nbytes % _ALIGN))
                size = out.tell()
        finally:
            self.abort()
        return size

    def _col(self, name: str) -> str:
        return os.path.join(self._dir, name)

    def _drop_duplicates(self) -> None:
        """Rewrite the columns and tar records without the rows of repeated keys."""
        dropped = duplicate_rows(self._dir, self._col("keys"), self._col("keys_end"))
        if not dropped.size:
            return
        n = self.rows
        ends = np.fromfile(self._col("keys_end"), np.int64) if len(dropped) else None
        blob = np.memmap(self._col("keys"), np.uint8, "r")
        tar_col = np.memmap(self._col("tar"), np.int32, "r")
        fmt_col = np.memmap(self._col("fmt"), np.uint8, "r")
        lost: Dict[int, List[List[Any]]] = {}
        for r in dropped.tolist():
            key = bytes(blob[(int(ends[r - 1]) if r else 0):int(ends[r])]).decode("utf-8")
            lost.setdefault(int(tar_col[r]), []).append(
                [f"duplicate key {key!r} (seen earlier in this list)", "duplicate",
                 f"{key}.{self.fmts[int(fmt_col[r])]}"])
        del ends, blob, tar_col, fmt_col
        for name in COLUMNS:
            blob_of = self._col(name + "_end") if name in STRINGS else ""
            kept = copy_rows(self._col(name), self._col(name + ".kept"), self._dtypes[name],
                             n, dropped, ends=blob_of, renumber=name.endswith("_end"))
            self._counts[name] = kept
        for name in COLUMNS:
            os.replace(self._col(name + ".kept"), self._col(name))
        with open(self._col("tars"), "rb") as src, open(self._col("tars.kept"), "wb") as out:
            gone = 0
            for t, line in enumerate(src):
                rec = json.loads(line)
                rec["first"] -= gone
                rec["count"] -= len(lost.get(t, ()))
                rec["bad"] += lost.get(t, [])
                gone += len(lost.get(t, ()))
                out.write(json.dumps(rec, ensure_ascii=False).encode("utf-8") + b"\n")
        os.replace(self._col("tars.kept"), self._col("tars"))
        self.rows -= len(dropped)
        self.bad += len(dropped)

    def _joined_records(self) -> str:
        """The tar records (JSON lines) joined by commas, for the header's list."""
        path = self._col("tars.json")
        with open(self._col("tars"), "rb") as src, open(path, "wb") as out:
            for i, line in enumerate(src):
                out.write((b"," if i else b"") + line.rstrip(b"\n"))
        return path

    def abort(self) -> None:
        """Remove the temporary column files (the index is left as it was)."""
        for f in self._files.values():
            f.close()
        self._hashes.close()
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> IndexWriter:
        return self

    def __exit__(self, kind: Optional[type], *_: Any) -> None:
        if kind is not None:
            self.abort()


def _copy(src: str, out: BinaryIO) -> int:
    """Append file ``src`` to ``out`` in 8 MiB pieces; returns the bytes copied."""
    n = 0
    with open(src, "rb") as f:
        while True:
            piece = f.read(8 << 20)
            if not piece:
                return n
            out.write(piece)
            n += len(piece)
