"""A WeNet raw list probed once: audio headers read across ranks, kept on disk.

Reading a raw list means reading every audio file's header (duration, sampling
rate). WeNet's own raw reading does that lazily per epoch per worker; our map-style
loader needs all durations up front, and at 10M lines probing on every rank would
take hours before the first batch. :func:`probed_raw_list` instead:

1. looks for a cache keyed by the lists' content (SHA-256 of their bytes, plus the
   directory relative ``wav`` paths resolve against): a Lhotse cuts manifest
   ``<list>.probe-<key>.jsonl.gz`` beside the first list (or, when that directory is
   read-only, in ``~/.cache/wenet_lhotse``), or in ``cache_dir`` /
   ``$WENET_LHOTSE_CACHE``; and a JSON sidecar
   with the lines that were skipped and why, so a later run reports them too;
2. if there is none, splits the list into blocks of :data:`BLOCK_LINES` lines; block
   ``b`` is probed by rank ``b % world_size``; when a ``torch.distributed`` group is
   initialised the results are gathered on every rank (gloo ``all_gather_object``, one
   round per ``world_size`` blocks, so memory stays bounded), duplicates and errors are
   resolved in list order (every rank reaches the same verdict, so none hangs), and
   local rank 0 of each node writes the cache atomically;
3. returns the manifest, which every later run (and every rank of this one, after a
   barrier) reads in seconds.

The loader uses it when ``lhotse_conf.probe_cache`` is set (``true``, or a cache
directory); by default it reads raw lists as WeNet does, every rank probing by itself,
and writes nothing next to the user's data.

The cut of a line is exactly what :func:`~wenet_lhotse.formats.raw_list.read_raw_list`
makes of it (same parser), so a cached run equals an uncached one. Editing a list
changes its key: a stale cache is never used (old ones are left for the user to
delete). Audio files changed in place under an unchanged list are not noticed.

A cache is trusted only when it is whole and is the one written for these lists: the
sidecar records the key, the manifest's size and SHA-256 and its number of cuts; a
manifest that does not match (cut short, edited, or planted beside the list under
its predictable name) is rebuilt, with a warning. Its lines are then read through
the same checked path as any manifest
(:class:`~wenet_lhotse.sources.manifest.LazyCheckedManifest`, commands refused
whatever the read policy's pipe opt-in): a
cut a raw line cannot produce (an audio source of type ``command``) is refused like
everywhere else.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import logging
import os
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Iterator, List, Optional, Sequence, Tuple, Union

from lhotse.utils import Pathlike

from wenet_lhotse.errors import SkippedItem, WenetDataError
from wenet_lhotse.formats.keyset import KeySet
from wenet_lhotse.formats.raw_list import LazyWenetRawListIterator
from wenet_lhotse.io.policy import ReadPolicy
from wenet_lhotse.io.streams import as_path_list, atomic_output
from wenet_lhotse.sources.manifest import LazyCheckedManifest

logger = logging.getLogger(__name__)

#: Lines per probing block (one unit of work for one rank).
BLOCK_LINES = 500
#: Bump when the cached cut layout changes: older caches are then ignored.
CACHE_VERSION = 2

_Line = Tuple[str, int, bytes]  # (list file, 1-based line, raw bytes)
# (key, cut JSON line), a bad line, or None for an empty line
_Result = Union[Tuple[str, bytes], SkippedItem, None]


@dataclass
class ProbeResult:
    """Where the probed cuts are, and what this process did to get them."""

    manifest: Path
    skips: Path
    from_cache: bool
    lines_probed: int  # lines parsed (headers read) by this rank

    def cuts(self, metadata_only: bool = False, *,
             policy: Optional[ReadPolicy] = None) -> LazyCheckedManifest:
        """The cached cuts, read with every manifest's checks, bad ones raised or
        skipped as ``policy`` says; commands always refused
        (:meth:`~wenet_lhotse.io.policy.ReadPolicy.without_pipe`): a raw line cannot
        make a ``command`` source, so a cache holding one was forged."""
        policy = (policy or ReadPolicy())
        return LazyCheckedManifest([self.manifest], metadata_only=metadata_only,
                                   policy=policy.without_pipe())


def list_key(paths: Sequence[str], wav_root: str) -> str:
    """16 hex digits of SHA-256 over the lists' bytes, their order and ``wav_root``."""
    h = hashlib.sha256(f"v{CACHE_VERSION}\0{wav_root}\0".encode())
    for p in paths:
        h.update(f"{len(p)}\0".encode())
        with open(p, "rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
        h.update(b"\0\0")
    return h.hexdigest()[:16]


def cache_paths(paths: Sequence[str], wav_root: str,
                cache_dir: Optional[Pathlike] = None) -> Tuple[Path, Path]:
    """``(cuts manifest, skips sidecar)`` of the cache for these lists."""
    first = Path(paths[0])
    where = cache_dir or os.environ.get("WENET_LHOTSE_CACHE")
    if not where:  # beside the list, unless its directory is read-only
        where = (first.parent if os.access(first.parent, os.W_OK)
                 else Path.home() / ".cache" / "wenet_lhotse")
    stem = f"{first.name}.probe-{list_key(paths, wav_root)}"
    return Path(where) / f"{stem}.jsonl.gz", Path(where) / f"{stem}.skips.json"


def _lines(paths: Sequence[str]) -> Iterator[_Line]:
    for path in paths:
        with open(path, "rb") as f:
            for lineno, raw in enumerate(f, 1):
                yield path, lineno, raw


def _blocks(paths: Sequence[str]) -> Iterator[List[_Line]]:
    it = _lines(paths)
    while block := list(islice(it, BLOCK_LINES)):
        yield block


def _probe_block(block: List[_Line], wav_root: str, policy: ReadPolicy) -> List[_Result]:
    parser = LazyWenetRawListIterator(block[0][0], wav_root=wav_root, check_duplicates=False,
                                      policy=policy)
    out: List[_Result] = []
    for path, lineno, raw in block:
        try:
            cut = parser.parse_line(raw, path, lineno, None)
        except WenetDataError as err:
            out.append(SkippedItem.from_error(err))
            continue
        out.append(None if cut is None else (
            cut.id, json.dumps(cut.to_dict(), ensure_ascii=False).encode("utf-8") + b"\n"))
    return out


def _group():
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return None, 1, 0
    group = dist.group.WORLD if dist.get_backend() == "gloo" else dist.new_group(backend="gloo")
    return group, dist.get_world_size(), dist.get_rank()


def _is_writer(rank: int) -> bool:
    local = os.environ.get("LOCAL_RANK")
    return int(local) == 0 if local is not None else rank == 0


def _digest(path: Path) -> Tuple[int, str]:
    """``(size in bytes, SHA-256 hex)`` of a file."""
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
            size += len(chunk)
    return size, h.hexdigest()


def _load_cache(manifest: Path, skips: Path) -> Optional[List[SkippedItem]]:
    """The cached skips when ``manifest`` is the whole manifest the sidecar ``skips``
    records (size and SHA-256), else None (the cache is rebuilt)."""
    try:
        record = json.loads(skips.read_text(encoding="utf-8"))
        size, sha = _digest(manifest)
        if not (isinstance(record, dict) and record.get("version") == CACHE_VERSION
                and record.get("manifest_bytes") == size
                and record.get("manifest_sha256") == sha):
            raise ValueError("it is not the manifest its sidecar records")
        return [SkippedItem(**d) for d in record["skips"]]
    except (OSError, ValueError, TypeError, KeyError, RecursionError) as err:
        logger.warning("%s: probe cache not used (%s: %s); probing again", manifest,
                       type(err).__name__, str(err)[:200])
        return None


def probed_raw_list(
    paths: Union[Pathlike, Sequence[Pathlike]],
    *,
    wav_root: Optional[Pathlike] = None,
    cache_dir: Optional[Pathlike] = None,
    policy: Optional[ReadPolicy] = None,
) -> ProbeResult:
    """The raw list(s) as a cached cuts manifest (see the module doc).

    :param policy: its ``strict``: raise the first bad line's :class:`WenetDataError`
        (on every rank); else record bad lines in its ``skip_report`` (also when they
        come from the cache); its URL protocols and network limits for the probes.
    """
    import torch.distributed as dist

    lists = [os.path.abspath(p) for p in as_path_list(paths)]
    for p in lists:
        if not os.path.isfile(p):
            raise WenetDataError("no such list file", p, kind="missing_file")
    root = os.path.abspath(str(wav_root) if wav_root is not None else os.getcwd())
    policy = (policy or ReadPolicy())
    manifest, skips = cache_paths(lists, root, cache_dir)
    group, world, rank = _group()
    cached = _load_cache(manifest, skips) if manifest.is_file() and skips.is_file() else None
    if group is not None:  # every rank takes the same branch (or none would return)
        verdicts: List = [None] * world
        dist.all_gather_object(verdicts, cached is not None, group=group)
        if not all(verdicts):
            cached = None
    if cached is not None:
        _report(cached, policy, log=False)
        logger.info("%s: probed durations from the cache %s", lists[0], manifest)
        return ProbeResult(manifest, skips, True, 0)

    bad: List[SkippedItem] = []
    counter = [0]
    merged = _merged(lists, root, group, world, rank, policy, bad, counter)
    if _is_writer(rank):
        # Skips (with the manifest's digest) first, manifest last: a manifest in place
        # means its cache is complete, and a sidecar tells whether it is the right one.
        tmp = manifest.with_suffix(".tmp.gz")
        with atomic_output(tmp, "wb") as f:
            with gzip.GzipFile(fileobj=f, mode="wb", mtime=0, compresslevel=1) as gz:
                for line in merged:
                    gz.write(line)
        size, sha = _digest(tmp)
        with atomic_output(skips, "w", encoding="utf-8") as f:
            json.dump({"version": CACHE_VERSION, "manifest_bytes": size,
                       "manifest_sha256": sha, "skips": [dataclasses.asdict(b) for b in bad]},
                      f, ensure_ascii=False)
        os.replace(tmp, manifest)
    else:
        for _ in merged:
            pass
    if group is not None:
        dist.barrier(group=group)  # every writer has committed before anyone reads
    _report(bad, policy, log=True)
    logger.info("%s: probed %d of its lines on rank %d of %d; cache %s", lists[0], counter[0],
                rank, world, manifest)
    return ProbeResult(manifest, skips, False, counter[0])


def _merged(lists: Sequence[str], root: str, group, world: int, rank: int,
            policy: ReadPolicy, bad: List[SkippedItem], counter: List[int]
            ) -> Iterator[bytes]:
    """The cuts' JSON lines in list order; this rank probes every ``world``-th block
    and gathers the others' (every rank runs the same collectives, in step)."""
    import torch.distributed as dist

    seen = KeySet()
    blocks = _blocks(lists)
    while True:
        round_blocks = list(islice(blocks, world))
        mine = round_blocks[rank] if rank < len(round_blocks) else None
        results = _probe_block(mine, root, policy) if mine is not None else None
        counter[0] += len(mine or [])
        gathered: List = [results]
        if group is not None:
            gathered = [None] * world
            dist.all_gather_object(gathered, results, group=group)
        if not round_blocks:
            return
        for block, res in zip(round_blocks, gathered):
            for (path, lineno, _), r in zip(block, res):
                if r is None:
                    continue
                if isinstance(r, tuple):
                    key, line = r
                    if seen.add(key):
                        yield line
                        continue
                    r = SkippedItem(path, lineno, None, "duplicate",
                                    f"duplicate key {key!r} (first seen earlier in this input)")
                bad.append(r)
                if policy.strict:  # every rank stops at this same line
                    raise WenetDataError(r.message, r.source, line=r.line, kind=r.kind)


def _report(items: List[SkippedItem], policy: ReadPolicy, log: bool) -> None:
    if items and policy.strict:
        r = items[0]
        raise WenetDataError(r.message, r.source, line=r.line, kind=r.kind)
    assert policy.skip_report is not None
    policy.skip_report.extend(items)
    if log:
        for item in items:
            logger.warning("skipped %s", item)
