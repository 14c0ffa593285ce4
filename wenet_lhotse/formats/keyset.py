"""Duplicate-key detection over inputs of millions of utterances, in bounded memory."""

from __future__ import annotations

import hashlib
from array import array


class KeySet:
    """A set of keys, for duplicate detection over lists of millions of lines.

    Keys are stored as 128-bit BLAKE2b digests in an open-addressing table of two
    ``array('Q')`` columns (16 bytes per slot, load factor at most 1/2: 32-64 bytes
    per key, against ~100+ bytes per key for a ``set`` of str). A false duplicate
    needs a 128-bit collision: about n**2 / 2**129, i.e. never in practice.
    """

    def __init__(self, capacity: int = 1024) -> None:
        cap = 1
        while cap < capacity:
            cap *= 2
        self._hi = array("Q", bytes(8 * cap))
        self._lo = array("Q", bytes(8 * cap))
        self._n = 0

    @staticmethod
    def _digest(key: str):
        d = hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=16).digest()
        hi, lo = int.from_bytes(d[:8], "little"), int.from_bytes(d[8:], "little")
        return hi, (lo or 1)  # (x, 0) marks an empty slot

    def _insert(self, hi: int, lo: int) -> bool:
        mask = len(self._hi) - 1
        i = hi & mask
        while True:
            slot_lo = self._lo[i]
            if slot_lo == 0:
                self._hi[i], self._lo[i] = hi, lo
                self._n += 1
                return True
            if slot_lo == lo and self._hi[i] == hi:
                return False
            i = (i + 1) & mask

    def add(self, key: str) -> bool:
        """Add ``key``; return False if it was already present."""
        if 2 * (self._n + 1) > len(self._hi):
            old_hi, old_lo = self._hi, self._lo  # rehash lazily: no per-key Python objects
            self._hi = array("Q", bytes(16 * len(old_hi)))
            self._lo = array("Q", bytes(16 * len(old_hi)))
            self._n = 0
            for h, low in zip(old_hi, old_lo):
                if low:
                    self._insert(h, low)
        return self._insert(*self._digest(key))

    def __contains__(self, key: str) -> bool:
        hi, lo = self._digest(key)
        mask = len(self._hi) - 1
        i = hi & mask
        while self._lo[i]:
            if self._lo[i] == lo and self._hi[i] == hi:
                return True
            i = (i + 1) & mask
        return False

    def __len__(self) -> int:
        return self._n
