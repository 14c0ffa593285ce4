"""``wenet-lhotse index``: the shard index of a WeNet shard list (:func:`index_shards`),
and what "index" means for the other input kinds (:func:`index_input`).

A shard list's tars are each read once, front to back (:func:`~wenet_lhotse.formats.
tar_index.index_tar`), on ``num_jobs`` local processes or a Dask cluster
(:func:`~wenet_lhotse.convert.executor.map_tasks`); the index
(:mod:`wenet_lhotse.formats.shard_index`) is written atomically beside the list or in
``cache_dir``. A rerun keeps the rows of every tar whose fingerprint still matches
(local: size, mtime and ctime -- any write, even one that restores the mtime, changes
the ctime, so a tar edited in place is read again; a copied tree is read again whole;
object storage: size and ETag) and reads only new or changed tars (``http(s)://`` tars
are always read again: a check would cost about as much). Bad utterances and unreadable
tars are recorded in the index, not raised: the loader reports them (strict: an error,
fault tolerant: counted skips).
A damaged index (cut short, another schema, tar records that disagree with its rows) is
rebuilt whole by a plain rerun (no ``--full`` needed).

Raw lists, cuts manifests and Shar need no new file: a raw list's index is the probe
cache (``lhotse_conf.probe_cache``, written here), a cuts manifest and Shar's
``cuts.*.jsonl.gz`` are read by line number by the map-mode readers already.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any, Dict, Optional

from wenet_lhotse.convert.executor import map_tasks
from wenet_lhotse.errors import WenetDataError
from wenet_lhotse.formats.index_writer import IndexWriter
from wenet_lhotse.formats.shard_index import ShardIndex, index_path
from wenet_lhotse.formats.shard_list import read_shard_entries
from wenet_lhotse.formats.tar_index import etag_digest, index_entry
from wenet_lhotse.io.outputs import refuse_clobber
from wenet_lhotse.io.policy import ReadPolicy
from wenet_lhotse.io.remote import is_remote
from wenet_lhotse.io.streams import is_local, local_path

logger = logging.getLogger(__name__)


@dataclass
class IndexSummary:
    """What an index run did: the index ``path``, its size (bytes), tars read now /
    kept from the previous index, utterances, and bad items recorded."""

    path: str
    bytes: int
    tars: int
    read: int
    kept: int
    utterances: int
    bad: int

    def __str__(self) -> str:
        return (f"{self.path}: {self.utterances} utterances in {self.tars} tars "
                f"({self.read} read, {self.kept} unchanged), {self.bad} bad items, "
                f"{self.bytes} bytes")


def _index_job(job: Any) -> Any:
    _, entry, policy = job
    return index_entry(entry, policy)


def _unchanged(rec: Dict[str, Any]) -> bool:
    url = rec["url"]
    if rec.get("size") is None:
        return False  # unreadable last time: try again
    if is_local(url):  # any write (or a reset mtime) changes ctime: read it again
        try:
            st = os.stat(local_path(url))
        except OSError:
            return False
        return (st.st_size == rec["size"] and st.st_mtime_ns == rec.get("mtime_ns")
                and st.st_ctime_ns == rec.get("ctime_ns"))
    if is_remote(url) and str(rec.get("digest") or "").startswith("etag:"):
        return etag_digest(url) == rec["digest"]
    return False


def index_shards(list_path: str, *, cache_dir: Optional[str] = None, out: Optional[str] = None,
                 num_jobs: int = 1, cluster: Optional[str] = None,
                 policy: Optional[ReadPolicy] = None, progress: bool = False,
                 full: bool = False) -> IndexSummary:
    """Index shard list ``list_path`` (see the module doc); ``out`` overrides the
    index's path, ``full`` reads every tar again; ``policy``: what may be opened (shell
    commands from the list, URL protocols, network limits)."""
    path = out or index_path(list_path, cache_dir)
    policy = policy or ReadPolicy()
    entries = read_shard_entries(list_path, policy=policy)
    refuse_clobber(path, [list_path] + [e.url for e in entries if is_local(e.url)],
                   option="-o" if out else "the index")
    old: Optional[ShardIndex] = None
    if not full:
        try:
            old = ShardIndex(path)
        except WenetDataError:
            old = None  # none yet, or unreadable: index everything
    kept: Dict[int, int] = {}  # list position -> tar of the old index
    jobs = []
    for i, entry in enumerate(entries):
        t = old.tar_of_url(entry.url) if old is not None else None
        if t is not None and _unchanged(old.tars[t]):
            kept[i] = t
        else:
            jobs.append((i, entry, policy))
    from tqdm.auto import tqdm

    # Rows go to the writer in list order as they come (bounded memory: map_tasks keeps
    # a bounded window of jobs in flight, ordered), kept tars taken from the old index.
    results = map_tasks(_index_job, jobs, num_jobs=num_jobs, cluster=cluster, ordered=True)
    with tqdm(total=len(jobs), desc="index", unit="tar", disable=not progress) as bar, \
            IndexWriter(path, [str(list_path)]) as writer:
        for i in range(len(entries)):
            if i in kept:
                rows = old.tar_rows(kept[i])
            else:
                _, rows = next(results)
                bar.update(1)
                bar.set_postfix(utt=len(rows), refresh=False)
            writer.add(rows)  # a repeated key is dropped there (recorded as bad)
        old = None  # its rows are all copied: release its map
        size = writer.close()
    summary = IndexSummary(path=path, bytes=size, tars=writer.tars, read=len(jobs),
                           kept=len(kept), utterances=writer.rows, bad=writer.bad)
    logger.info("%s", summary)
    return summary


def index_input(path: str, **kw: Any) -> str:
    """Index any input kind; returns a one-line account of what was done."""
    from wenet_lhotse.sources.detect import detect_input_kind
    from wenet_lhotse.sources.registry import get_kind

    if not is_local(path) and not kw.get("cache_dir") and not kw.get("out"):
        raise ValueError(f"{path}: the index of remote data is written to a local cache "
                         "directory: pass --cache-dir DIR (lhotse_conf.shard_index: DIR)")
    reader = get_kind(detect_input_kind(path))
    if reader.indexable:
        return str(index_shards(path, **kw))
    if kw.get("out"):
        raise ValueError(f"{path}: -o/--out is for shard lists (this is a {reader.name} "
                         "input)")
    return reader.prepare_index(path, cache_dir=kw.get("cache_dir"))
