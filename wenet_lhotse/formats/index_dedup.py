"""Duplicate keys of a shard index found on disk, in memory independent of the corpus
(used by :class:`~wenet_lhotse.formats.index_writer.IndexWriter`).

While rows are written, each key's 64-bit BLAKE2b hash and row number go to one of
:data:`BUCKETS` files by the hash's top bits (:class:`KeyHashes`). At the end each file
is sorted alone (:func:`duplicate_rows`: 16 bytes x rows / 64 in memory, 2.5 MB at 10M
utterances); a row whose hash an earlier row had, and whose key string equals that
row's (read back from the keys column: a hash collision is never taken for a
duplicate), is a duplicate. Like a streamed reader, the first occurrence in list order
is kept and the later ones are dropped (:func:`copy_rows` copies a column without
them).
"""

from __future__ import annotations

import hashlib
import os
from typing import Any, BinaryIO, Iterator, List, Sequence, Tuple

import numpy as np

#: Bucket files of key hashes (by the top 6 bits).
BUCKETS = 64
_PAIR = np.dtype([("h", "<u8"), ("r", "<i8")])
#: Rows copied per piece when a column is copied without the duplicates.
PIECE_ROWS = 1 << 20


class KeyHashes:
    """Appends ``(hash, row)`` of each key to the bucket files under ``directory``."""

    def __init__(self, directory: str) -> None:
        self.dir = directory
        self._files: List[BinaryIO] = [open(os.path.join(directory, f"h{b:02d}"), "wb")
                                       for b in range(BUCKETS)]

    def add(self, keys: Sequence[str], first_row: int) -> None:
        if not keys:
            return
        digests = b"".join(hashlib.blake2b(k.encode("utf-8", "surrogatepass"),
                                           digest_size=8).digest() for k in keys)
        pairs = np.empty(len(keys), _PAIR)
        pairs["h"] = np.frombuffer(digests, "<u8")
        pairs["r"] = np.arange(first_row, first_row + len(keys), dtype=np.int64)
        bucket = (pairs["h"] >> np.uint64(58)).astype(np.int64)
        order = np.argsort(bucket, kind="stable")
        pairs, bucket = pairs[order], bucket[order]
        cuts = np.searchsorted(bucket, np.arange(BUCKETS + 1))
        for b in np.unique(bucket):
            self._files[b].write(pairs[cuts[b]:cuts[b + 1]].tobytes())

    def close(self) -> None:
        for f in self._files:
            f.close()


def duplicate_rows(directory: str, keys_blob: str, keys_ends: str) -> np.ndarray:
    """The rows (sorted) whose key an earlier row had (see the module doc); the keys
    column's files: the UTF-8 bytes and the int64 end offsets."""
    blob = np.memmap(keys_blob, np.uint8, "r") if os.path.getsize(keys_blob) else None
    ends = np.memmap(keys_ends, np.int64, "r") if os.path.getsize(keys_ends) else None

    def key(row: int) -> bytes:
        lo = int(ends[row - 1]) if row else 0
        return bytes(blob[lo:int(ends[row])])

    out: List[int] = []
    for b in range(BUCKETS):
        path = os.path.join(directory, f"h{b:02d}")
        if not os.path.getsize(path):
            continue
        pairs = np.fromfile(path, _PAIR)
        pairs = pairs[np.lexsort((pairs["r"], pairs["h"]))]
        same = np.flatnonzero(pairs["h"][1:] == pairs["h"][:-1]) + 1
        if not same.size:
            continue
        groups: dict = {}
        for i in same.tolist():  # rows sharing a hash: compare the keys themselves
            start = i
            while start > 0 and pairs["h"][start - 1] == pairs["h"][i]:
                start -= 1
            groups.setdefault(start, []).append(i)
        for start, later in groups.items():
            seen = {key(int(pairs["r"][start]))}
            for i in later:
                k = key(int(pairs["r"][i]))
                if k in seen:
                    out.append(int(pairs["r"][i]))
                seen.add(k)
    return np.array(sorted(out), np.int64)


def kept_runs(n: int, dropped: np.ndarray) -> Iterator[Tuple[int, int]]:
    """``[a, b)`` row ranges of ``range(n)`` without the rows ``dropped`` (sorted)."""
    at = 0
    for d in dropped.tolist():
        if d > at:
            yield at, d
        at = d + 1
    if at < n:
        yield at, n


def copy_rows(src: str, dst: str, dtype: Any, n: int, dropped: np.ndarray,
              ends: str = "", renumber: bool = False) -> int:
    """Copy the column file ``src`` (``n`` rows) to ``dst`` without the ``dropped``
    rows, a piece at a time; returns the items written. A strings blob passes its
    ``ends`` file (a row is a byte range); an ends column passes ``renumber`` (its
    offsets restart from the bytes kept)."""
    dtype = np.dtype(dtype)
    data = np.memmap(src, dtype, "r") if os.path.getsize(src) else np.zeros(0, dtype)
    bounds = np.memmap(ends, np.int64, "r") if ends and os.path.getsize(ends) else None
    written = total = 0
    with open(dst, "wb") as out:
        for a, b in kept_runs(n, dropped):
            for lo in range(a, b, PIECE_ROWS):
                hi = min(b, lo + PIECE_ROWS)
                start = 0
                if bounds is not None or renumber:
                    offsets = bounds if bounds is not None else data
                    start = int(offsets[lo - 1]) if lo else 0
                if bounds is not None:  # blob: the bytes of rows [lo, hi)
                    piece = np.asarray(data[start:int(bounds[hi - 1])])
                elif renumber:
                    piece = np.asarray(data[lo:hi]) - start + total
                    total = int(piece[-1])
                else:
                    piece = np.asarray(data[lo:hi])
                out.write(piece.tobytes())
                written += len(piece)
    return written
