"""WeNet input -> Lhotse Shar, in parallel over output shards and restartable.

Output layout is Lhotse's own (``CutSet.from_shar(in_dir=OUT)`` reads it)::

    OUT/cuts.000000.jsonl.gz   OUT/recording.000000.tar
    OUT/cuts.000001.jsonl.gz   OUT/recording.000001.tar   ...

Shard ``i`` comes from input tar ``i`` (shard lists: each input tar is streamed
once, by one job) or from cuts ``[i * shard_size, (i + 1) * shard_size)`` of a raw
list. One job (:mod:`.shar_jobs`: the jobs, cut from the input, and the writing of
one) writes one output shard with Lhotse's ``SharWriter`` into a private
temporary directory *next to* ``OUT`` (``.OUT.partial/``: Lhotse's reader treats
every file inside ``OUT`` as a shard, so temporary files must live outside it),
then moves the tar and, last, the cuts manifest into ``OUT`` with ``os.replace``.
A shard is complete when both files exist, pass a cheap integrity check (gzip
stream intact, tar holds two members per cut and is not cut short) and were written
from a complete input; a rerun skips complete shards and rewrites the rest. One
conversion at a time per output directory: a run holds ``.OUT.lock`` (``flock``; a
second run fails at once, naming the holder) and starts by clearing ``.OUT.partial/``.

Nothing is lost on rerun (:mod:`.shar_state`): a shard written while items were
skipped (fault-tolerant mode) records them in its manifest's gzip header and is
rewritten by the next run; an input tar or list line that yields nothing still
gets its (empty) shard, so the numbering has no gaps; for raw lists shard ``i``
holds non-empty lines ``[i * shard_size, (i + 1) * shard_size)`` of the input, good
or bad, so fixing a line in place changes only its own shard. Keys are unique across
the whole output: a key already written by an earlier shard is an error (strict) or
skipped and recorded.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, List, Optional, Sequence, Union

from lhotse.utils import Pathlike

from wenet_lhotse.convert.executor import map_tasks
from wenet_lhotse.convert.lossless import AUDIO_FORMATS
from wenet_lhotse.convert.shar_jobs import ShardJob, ShardResult, iter_jobs, write_shard
from wenet_lhotse.convert.shar_state import (
    drop_duplicates,
    partial_dir,
    remove_partial_dir,
    shard_ids,
    shard_is_complete,
)
from wenet_lhotse.errors import SkipReport, WenetDataError
from wenet_lhotse.formats.keyset import KeySet
from wenet_lhotse.io.policy import ReadPolicy
from wenet_lhotse.io.remote import is_remote
from wenet_lhotse.io.tempfiles import output_lock
from wenet_lhotse.sources.detect import detect_input_kind
from wenet_lhotse.sources.registry import get_kind
from wenet_lhotse.sources.shar_dir import shar_files

logger = logging.getLogger(__name__)


@dataclass
class SharConversion:
    """What :func:`wenet_to_shar` did. Counts are utterances unless named otherwise."""

    out_dir: Union[Path, str]  # str: an object-store URL
    num_shards: int = 0
    written_shards: List[int] = field(default_factory=list)
    skipped_shards: List[int] = field(default_factory=list)  # already complete
    shards_with_skips: List[int] = field(default_factory=list)  # written, items left out
    num_cuts_written: int = 0
    skip_report: SkipReport = field(default_factory=SkipReport)
    seconds: float = 0.0  # wall-clock time of the conversion


def wenet_to_shar(
    data_list: Union[Pathlike, Sequence[Pathlike]],
    out_dir: Pathlike,
    *,
    data_type: str = "auto",
    shard_size: Optional[int] = None,
    num_jobs: int = 1,
    audio_format: str = "lossless",
    wav_root: Optional[Pathlike] = None,
    progress: bool = False,
    cluster: Optional[str] = None,
    policy: Optional[ReadPolicy] = None,
) -> SharConversion:
    """Convert a WeNet ``data.list`` (raw or shard list) into a Lhotse Shar directory.

    :param data_list: one list file or several (read in order).
    :param out_dir: the Shar directory (created, parents too).
    :param data_type: ``"raw"``, ``"shard"``, another detected kind (Parquet, a cuts or
        other manifest: shards of ``shard_size`` of its cuts) or ``"auto"`` (told apart
        from the content).
    :param shard_size: utterances per output shard for raw lists (default 1000).
        Shard lists keep one output shard per input tar; passing it there is an error.
    :param num_jobs: worker processes; each writes whole output shards (1 = in this process).
    :param audio_format: ``"lossless"`` (default: decoded samples identical to the
        source, see :mod:`wenet_lhotse.convert.lossless`), ``"copy"`` (whole WAV/FLAC
        recordings stored byte for byte: faster, larger; else as "lossless") or one of
        Lhotse's Shar audio formats (``"flac"`` is 16-bit, ``"opus"``/``"mp3"`` lossy).
    :param progress: show a tqdm bar (unit: output shards, moved as they complete).
    :param cluster: a Dask scheduler address (``tcp://host:8786``): one task per output
        shard runs on its workers (which must see the input paths, and ``out_dir``
        unless it is on object storage); a task lost with its worker is rerun elsewhere.
    :param policy: how the input is read (:class:`~wenet_lhotse.io.policy.ReadPolicy`):
        ``strict`` (default) raises :class:`WenetDataError` on the first bad item;
        otherwise each is skipped, logged and recorded in the policy's ``skip_report``
        (also the result's); ``pipe:CMD`` lines of a shard list run only when it allows.
    :return: a :class:`SharConversion` summary.

    Restartable: shards already complete in ``out_dir`` and written from the same
    input (their fingerprint: input files' sizes and mtimes, the lines' cuts, the
    options) are skipped; damaged, missing, those written while items were skipped and
    those written from another or a changed input are rewritten.
    """
    if audio_format not in AUDIO_FORMATS:
        raise ValueError(f"audio_format must be one of {AUDIO_FORMATS}, got {audio_format!r}")
    lists = [data_list] if isinstance(data_list, (str, os.PathLike)) else list(data_list)
    if data_type == "auto":
        data_type = detect_input_kind(lists[0])
    refusal = get_kind(data_type).import_shar_refusal
    if refusal or get_kind(data_type).text_only:
        raise ValueError(f"{lists[0]}: a {data_type} input: "
                         f"{refusal or 'text only, no audio to write'}")
    if get_kind(data_type).lists_tars and shard_size is not None:
        raise ValueError("shard_size applies to raw lists; a shard list keeps one Shar shard "
                         "per input tar (re-shard with export_shards if needed)")
    policy = policy or ReadPolicy()
    remote = is_remote(str(out_dir))
    out: Union[Path, str] = str(out_dir).rstrip("/") if remote else Path(out_dir)
    lock = contextlib.ExitStack()
    if not remote:
        out.mkdir(parents=True, exist_ok=True)  # Lhotse's to_shar would not create it
        lock.enter_context(output_lock(str(out)))  # one writer: a second fails at once
        # Leftovers of an interrupted run are never complete shards: start clean.
        shutil.rmtree(partial_dir(out), ignore_errors=True)
    with lock:
        return _convert(out, lists, data_type, shard_size, num_jobs, audio_format, policy,
                        wav_root, progress, cluster, remote)


def _convert(out: Union[Path, str], lists: List[Pathlike], data_type: str,
             shard_size: Optional[int], num_jobs: int, audio_format: str,
             policy: ReadPolicy, wav_root: Optional[Pathlike], progress: bool,
             cluster: Optional[str], remote: bool) -> SharConversion:
    """:func:`wenet_to_shar` once its output directory is ready (and locked). Skips
    go to ``policy``'s report: the parent's directly, each job's through its result."""
    strict, report = policy.strict, policy.skip_report
    result = SharConversion(out_dir=out, skip_report=report)
    start = time.perf_counter()
    jobs, total = iter_jobs(lists, data_type, shard_size, policy, wav_root,
                            probe_workers=num_jobs, cluster=cluster)
    options = [data_type, audio_format, shard_size]  # part of every shard's fingerprint
    # Raw lists are checked for repeated keys as they are read, tars one at a time by
    # their job: across tars, here, with the keys of the shards kept from a former run.
    seen: Optional[KeySet] = None
    kept: Optional[set] = None
    if get_kind(data_type).lists_tars:
        seen, kept, job_list = KeySet(), set(), list(jobs)
        for job in job_list:
            job.input_id = job.fingerprint(options)
            if shard_is_complete(out, job.index, job.input_id):
                kept.add(job.index)
                for key in shard_ids(out, job.index):
                    seen.add(key)
        jobs = iter(job_list)

    from tqdm.auto import tqdm

    bar = tqdm(total=total, unit="shard", desc="to Shar", disable=not progress)

    def done(res: ShardResult) -> None:
        result.written_shards.append(res.index)
        report.merge(res.skip_report)  # already logged where they were found
        dups = [k for k in res.ids if not seen.add(k)] if seen is not None else []
        if dups:
            tar = by_index[res.index].tar
            errors = [WenetDataError(f"duplicate key {k!r} (another input tar holds it too)",
                                     tar.url, member=k, kind="duplicate") for k in dups]
            drop_duplicates(out, res.index, dups, errors, strict, partial_dir(out)
                            if not is_remote(str(out)) else None)
            for err in errors:
                report.handle(err, strict)
            res.num_cuts -= len(dups)
        result.num_cuts_written += res.num_cuts
        if res.with_skips or dups:
            result.shards_with_skips.append(res.index)
        bar.update(1)
        bar.set_postfix(utts=result.num_cuts_written, skipped=len(report))

    by_index = {}

    def todo() -> Iterator[ShardJob]:
        for job in jobs:
            result.num_shards += 1
            job.input_id = job.input_id or job.fingerprint(options)
            if job.index in kept if kept is not None else shard_is_complete(
                    out, job.index, job.input_id):
                result.skipped_shards.append(job.index)
                bar.update(1)
                continue
            if seen is not None:
                by_index[job.index] = job
            yield job

    # Each job records into its own report (write_shard), merged by done(): the parent's
    # report does not travel to the workers.
    write = functools.partial(write_shard, out_dir=str(out), audio_format=audio_format,
                              policy=policy.replace(skip_report=SkipReport()))
    try:
        # bounded: the input is streamed, not loaded; the bar moves as shards complete
        for _, res in map_tasks(write, todo(), num_jobs=num_jobs, cluster=cluster,
                                ordered=False):
            done(res)
    finally:
        bar.close()
        if not remote:
            remove_partial_dir(out)
    result.written_shards.sort()
    result.shards_with_skips.sort()
    result.seconds = time.perf_counter() - start
    indices = shar_files(out).get("cuts", {})
    stale = sorted(Path(n).name for i, n in indices.items() if i >= result.num_shards)
    if stale:
        logger.warning("%s holds shards beyond this input's %d (%s...): left over from a "
                       "run with other input or shard size? CutSet.from_shar will read them",
                       out, result.num_shards, stale[0])
    if result.shards_with_skips:
        logger.warning("Shar %s: %d shards were written with items skipped (%s...); they "
                       "are rewritten by the next run, after the input is fixed", out,
                       len(result.shards_with_skips), result.shards_with_skips[:5])
    logger.info("Shar %s: %d shards (%d written, %d already complete), %d utterances written; %s",
                out, result.num_shards, len(result.written_shards), len(result.skipped_shards),
                result.num_cuts_written, report.summary())
    return result
