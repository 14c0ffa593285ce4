"""A WeNet raw list read over blocks of lines, the lines parsed (audio headers probed)
by a pool, results in list order: what ``import`` and ``stats -j`` use.

Lines are parsed by the formats reader's own per-line parser
(:meth:`~wenet_lhotse.formats.raw_list.LazyWenetRawListIterator.parse_line`), so the
cut layout and every error message are :func:`~wenet_lhotse.formats.raw_list.
read_raw_list`'s; only the header reads run elsewhere, on whatever ``mapper`` the caller
gives (a local pool, a Dask cluster: the converters' ``map_tasks``). Repeated keys are
detected in order, in the calling process.
"""

from __future__ import annotations

import functools
import os
from typing import Any, Callable, Iterator, List, Optional, Sequence, Tuple

from lhotse.utils import Pathlike

from wenet_lhotse.errors import SkippedItem, WenetDataError
from wenet_lhotse.formats.keyset import KeySet
from wenet_lhotse.formats.raw_list import LazyWenetRawListIterator
from wenet_lhotse.io.policy import ReadPolicy
from wenet_lhotse.io.remote import is_remote
from wenet_lhotse.io.streams import open_input

#: Lines sent to a pool worker at a time.
BLOCK_LINES = 256

Block = Tuple[str, List[Tuple[int, bytes]]]  # (list path, [(1-based line, raw line)])

#: ``(fn, jobs) -> iterator of (job, fn(job))`` in job order, closable
Mapper = Callable[[Callable[[Any], Any], Iterator[Any]], Iterator[Tuple[Any, Any]]]


def parse_block(block: Block, wav_root: Optional[str], probe: bool = True,
                serialize: Optional[Callable[[Any], Any]] = None,
                policy: Optional[ReadPolicy] = None) -> List[Any]:
    """Parse and probe one block of lines (runs in a pool worker, the ``policy`` -- URL
    protocols, network limits -- pickled to it): per line its cut (``serialize(cut)``
    when given: the pool then does the serialization too), its
    :class:`WenetDataError`, or None for an empty line."""
    path, lines = block
    # The reader's per-line parser (header probe included); duplicates are checked
    # by the caller, in list order, hence seen=None.
    reader = LazyWenetRawListIterator(path, wav_root=wav_root, check_duplicates=False,
                                      probe=probe, policy=policy)
    out: List[Any] = []
    for lineno, raw in lines:
        try:
            cut = reader.parse_line(raw, path, lineno, None)
        except WenetDataError as err:
            out.append(err)
            continue
        out.append(serialize(cut) if serialize is not None and cut is not None else cut)
    return out


def line_blocks(paths: Sequence[str], policy: ReadPolicy) -> Iterator[Block]:
    """The lines of each list, :data:`BLOCK_LINES` at a time; a list that cannot be
    opened goes to ``policy``."""
    for path in paths:
        try:
            f = open_input(path, policy=policy) if is_remote(path) else open(path, "rb")
        except OSError as e:
            policy.handle(WenetDataError(f"cannot open list: {e}", path,
                                         kind="missing_file"))
            continue
        with f:
            block: List[Tuple[int, bytes]] = []
            for lineno, raw in enumerate(f, 1):
                block.append((lineno, raw))
                if len(block) == BLOCK_LINES:
                    yield path, block
                    block = []
            if block:
                yield path, block


def parse_raw_lines(paths: Sequence[str], policy: ReadPolicy, *, mapper: Mapper,
                    wav_root: Optional[Pathlike] = None, check_duplicates: bool = True,
                    probe: bool = True, serialize: Optional[Callable[[Any], Any]] = None,
                    yield_skips: bool = False) -> Iterator[Tuple[Any, str, int]]:
    """``(cut, list file, 1-based line)`` for each line of the lists, in list order,
    the blocks parsed by ``mapper``; a bad line goes to ``policy`` (and with
    ``yield_skips`` comes as ``(SkippedItem, file, line)`` too). ``serialize``: what
    the pool returns instead of each cut (a tuple whose first item is the cut id)."""
    root = os.path.abspath(str(wav_root) if wav_root is not None else os.getcwd())
    seen = KeySet() if check_duplicates else None
    # the pool's copy of the policy starts with an empty report (its errors come back)
    parse = functools.partial(parse_block, wav_root=root, probe=probe, serialize=serialize,
                              policy=policy.replace(skip_report=None))
    done = mapper(parse, line_blocks(paths, policy))
    try:
        for (path, lines), results in done:
            for (lineno, _), res in zip(lines, results):
                if res is None:
                    continue  # empty line
                if not isinstance(res, WenetDataError):
                    key = res[0] if isinstance(res, tuple) else res.id
                    if seen is None or seen.add(key):
                        yield res, path, lineno
                        continue
                    res = WenetDataError(f"duplicate key {key!r} (first seen earlier in "
                                         "this input)", path, line=lineno, kind="duplicate")
                policy.handle(res)
                if yield_skips:
                    yield SkippedItem.from_error(res), path, lineno
    finally:  # a strict error raised here: end the pool now, not at interpreter exit
        done.close()
