"""Tar members read by offset, several at a time: :func:`read_members`.

The members asked of one tar are sorted by offset and read in as few requests as
possible: neighbours closer than ``gap`` bytes share one read (one ``pread`` locally).
On object storage and HTTP a tar is read in aligned blocks of :data:`BLOCK_BYTES` (4 MiB;
missing neighbours in one ranged GET, through the retrying readers of
:mod:`~wenet_lhotse.io.remote`), kept in a per-process LRU of
``$WENET_LHOTSE_RANGE_CACHE_MB`` (default 64 MiB): a sampler draws its batches from a
buffer of a few tars read in order, so the next batches' members mostly lie in blocks
already fetched -- large sequential ranges, not one request per utterance.

Each read starts at the member's own 512-byte tar header, which must still name the
member and its size, and the member's bytes must still have the CRC-32 the index
recorded: a tar replaced, rewritten or edited in place since it was indexed is named
(kind ``"stale_index"``), never read as other bytes. Sizes above the member cap
(:func:`~wenet_lhotse.formats.checks.max_member_bytes`) are refused before any read.
"""

from __future__ import annotations

import os
import tarfile
import threading
import zlib
from collections import OrderedDict
from typing import Any, Dict, List, Optional, Sequence, Tuple

from wenet_lhotse.errors import WenetDataError
from wenet_lhotse.formats.checks import max_member_bytes
from wenet_lhotse.formats.tar_members import read_exact
from wenet_lhotse.io.policy import ReadPolicy
from wenet_lhotse.io.streams import BLOCK, is_local, local_path

#: Bytes between two members read through rather than split into two requests.
GAP = 1 << 20

REINDEX = "rerun wenet-lhotse index on its list"

#: Bytes per cached block of a remote tar.
BLOCK_BYTES = 4 << 20


class _BlockCache:
    """Blocks of remote tars, least recently used dropped first (thread-safe)."""

    def __init__(self) -> None:
        self._blocks: OrderedDict[Tuple[str, int], bytes] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def capacity() -> int:
        mb = float(os.environ.get("WENET_LHOTSE_RANGE_CACHE_MB", "64"))
        return max(0, int(mb * (1 << 20)) // BLOCK_BYTES)

    def get(self, url: str, block: int) -> Optional[bytes]:
        with self._lock:
            data = self._blocks.get((url, block))
            if data is not None:
                self._blocks.move_to_end((url, block))
            return data

    def put(self, url: str, block: int, data: bytes) -> None:
        cap = self.capacity()
        with self._lock:
            self._blocks[(url, block)] = data
            while len(self._blocks) > cap:
                self._blocks.popitem(last=False)


_CACHE = _BlockCache()


def _read_blocks(url: str, start: int, length: int, policy: ReadPolicy) -> bytes:
    """``[start, start + length)`` of a remote tar through the block cache."""
    first, last = start // BLOCK_BYTES, (start + length - 1) // BLOCK_BYTES
    if last - first + 1 > _CACHE.capacity():
        return _read_range(url, start, length, policy)  # larger than the cache: read through
    have = {b: _CACHE.get(url, b) for b in range(first, last + 1)}
    missing = [b for b, d in have.items() if d is None]
    runs: List[List[int]] = []
    for b in missing:
        if runs and b == runs[-1][-1] + 1:
            runs[-1].append(b)
        else:
            runs.append([b])
    for run in runs:  # missing neighbours: one request
        data = _read_range(url, run[0] * BLOCK_BYTES, len(run) * BLOCK_BYTES, policy)
        for i, b in enumerate(run):
            have[b] = data[i * BLOCK_BYTES:(i + 1) * BLOCK_BYTES]
            _CACHE.put(url, b, have[b])
    at = start - first * BLOCK_BYTES
    return b"".join(have[b] for b in range(first, last + 1))[at:at + length]


def _read_range(url: str, start: int, length: int, policy: ReadPolicy) -> bytes:
    if is_local(url):
        try:
            with open(local_path(url), "rb") as f:
                f.seek(start)
                return f.read(length)
        except FileNotFoundError:
            raise WenetDataError(f"missing (it was indexed; {REINDEX})", url,
                                 kind="stale_index") from None
        except OSError as err:
            raise WenetDataError(f"cannot read: {err}", url, kind="io") from None
    reader = _ranged_reader(url, start, length, policy)
    try:  # an HTTP server must answer range requests (else: one line saying so)
        return read_exact(reader, length)
    finally:
        reader.close()


def _ranged_reader(url: str, start: int, length: int, policy: ReadPolicy):
    """A retrying reader of ``url`` from byte ``start`` whose requests fit reads of
    ``length`` bytes (object storage: one ranged GET of exactly each read, no HEAD;
    HTTP through urllib3: ranged requests of ``length`` bytes, at least 64 KiB), within
    the ``policy``'s limits and URL protocols."""
    from wenet_lhotse.io.http_reader import HttpReader
    from wenet_lhotse.io.remote import RangeGetReader
    from wenet_lhotse.io.remote_audio import is_http

    if not is_http(url):
        return RangeGetReader(url, start, policy)

    class _At(HttpReader):
        _first = True

        def _open(self) -> None:
            if self._first:  # the constructor's open: at ``start``, not at byte 0
                self._first = False
                self.pos = start
            super()._open()

    return _At(url, policy.read_limits(), block_size=max(length, 1 << 16))


def _check_header(url: str, block: bytes, member: str, size: int) -> None:
    try:
        info = tarfile.TarInfo.frombuf(block, tarfile.ENCODING, "surrogateescape")
    except Exception:
        info = None
    # a name over 100 bytes lives in a pax/GNU header before this one: size only then
    if (info is None or info.size != size
            or (info.name != member and len(member.encode("utf-8")) < 100)):
        raise WenetDataError(f"no longer holds this member where it was indexed; {REINDEX}",
                             url, member=member, kind="stale_index")


def read_members(url: str, members: Sequence[Tuple[Any, ...]], gap: int = GAP,
                 policy: Optional[ReadPolicy] = None, blocks: bool = True
                 ) -> Dict[str, object]:
    """``{member: bytes or WenetDataError}`` for ``(member name, data offset, size)``
    or ``(name, offset, size, CRC-32 or None)`` of tar ``url`` (see the module doc); a
    member whose bytes no longer match its CRC is a ``"stale_index"`` error. An error
    that concerns the whole tar (gone, unreadable) is raised; one that concerns a member
    is returned for it. ``policy``: the member size cap, network limits and URL protocols
    (default: the environment's). ``blocks=False``: a remote tar's exact ranges, no block
    cache (a member whose tar is not read around it any more: the window order's carried
    cuts)."""
    policy = policy if policy is not None else ReadPolicy()
    cap = max_member_bytes(policy.max_member_bytes)
    out: Dict[str, object] = {}
    todo = []
    crcs = {m[0]: m[3] for m in members if len(m) > 3 and m[3] is not None}
    for name, offset, size, *_ in members:
        if size > cap:
            out[name] = WenetDataError(f"member of {size} bytes is over the "
                                       f"{cap}-byte cap", url, member=name, kind="bad_member")
        else:
            todo.append((offset - BLOCK, offset + size, name, size))
    todo.sort()
    groups: List[List[Tuple[int, int, str, int]]] = []
    for item in todo:
        if groups and item[0] - groups[-1][-1][1] <= gap:
            groups[-1].append(item)
        else:
            groups.append([item])
    for group in groups:
        start = group[0][0]
        end = max(e for _, e, _, _ in group)
        read = _read_range if is_local(url) or not blocks else _read_blocks
        data = read(url, start, end - start, policy)
        for lo, hi, name, size in group:
            piece: Optional[bytes] = data[lo - start: hi - start]
            if len(piece) < hi - lo:
                out[name] = WenetDataError(f"cut short since it was indexed; {REINDEX}", url,
                                           member=name, kind="stale_index")
                continue
            try:
                _check_header(url, piece[:BLOCK], name, size)
            except WenetDataError as err:
                out[name] = err
                continue
            data_of = piece[BLOCK:]
            if name in crcs and zlib.crc32(data_of) != crcs[name]:
                out[name] = WenetDataError(f"changed since it was indexed (its bytes differ "
                                           f"from the indexed CRC-32); {REINDEX}", url,
                                           member=name, kind="stale_index")
                continue
            out[name] = data_of
    return out
