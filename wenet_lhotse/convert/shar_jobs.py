"""The jobs of a Shar conversion (:func:`~wenet_lhotse.convert.shar.wenet_to_shar`):
one :class:`ShardJob` per output shard, cut from the input, and :func:`write_shard`,
which writes one.

Shard ``i`` is written from input tar ``i`` of a shard list (a line that is bad, e.g. a
refused ``pipe:``, keeps its place as an empty shard recording why) or from non-empty
lines ``[i * shard_size, (i + 1) * shard_size)`` of a raw list, good or bad (the bad
ones are recorded in the shard), so the numbering has no gaps and fixing a line changes
only its own shard. A job's fingerprint (:meth:`ShardJob.fingerprint`) says what it is
written from; :mod:`.shar_state` keeps it in the shard to tell a rerun what is stale.

:func:`write_shard` runs in a pool or Dask worker. It writes with Lhotse's
``SharWriter`` (or :mod:`.lossless`'s writers) into a private temporary directory
(next to ``OUT``, or a local one for object storage), then moves the tar and, last, the
cuts manifest into place: nothing of a shard appears until all of it is written. An
utterance that cannot be written (unsafe key, no sample, a custom field JSON cannot
hold, unreadable audio) is skipped and recorded (or raised, strict) -- unless part of
it already reached the tar, which loses the whole shard (raised).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

from lhotse.cut import Cut
from lhotse.shar import SharWriter
from lhotse.utils import Pathlike

from wenet_lhotse.convert.lossless import CopyingSharWriter, LosslessAudioTarWriter
from wenet_lhotse.convert.shar_state import (
    empty_shard,
    file_identity,
    input_fingerprint,
    make_record,
    partial_dir,
    remote_shard_urls,
    write_record,
)
from wenet_lhotse.errors import SkippedItem, SkipReport, WenetDataError, short_error
from wenet_lhotse.formats.checks import check_key
from wenet_lhotse.formats.layout import json_value
from wenet_lhotse.formats.shard_reader import ShardEntry, read_one_tar, read_shard_entries
from wenet_lhotse.io.policy import ReadPolicy
from wenet_lhotse.io.pool import commit
from wenet_lhotse.io.remote import is_remote, remote_put
from wenet_lhotse.sources.registry import get_kind
from wenet_lhotse.sources.shar_dir import shard_paths


@dataclass
class ShardJob:
    """Output shard ``index`` and what it is written from: an input tar, or a raw
    list's cuts with their lines and the lines already skipped."""

    index: int
    tar: Optional[ShardEntry] = None  # shard-list input: the input tar (path, URL, pipe:)
    cuts: Optional[List[Cut]] = None  # raw-list input: this shard's cuts (metadata only)
    lines: Optional[List[Tuple[str, int]]] = None  # raw-list input: (list file, line) per cut
    skipped: List[SkippedItem] = field(default_factory=list)  # input items already left out
    input_id: Optional[str] = None  # the fingerprint of what it is written from
    origin: Optional[List[Any]] = None  # other kinds: the input file's identity, cut range

    def fingerprint(self, options: Sequence[Any]) -> str:
        """What this shard is written from: the tar (path, size, mtime), the input
        file and cut range (``origin``: other kinds, whose audio may be in memory) or
        the cuts of its lines with their audio files', the skipped items, and
        ``options``."""
        if self.tar is not None:
            return input_fingerprint([*options, file_identity(self.tar.url)])
        if self.origin is not None:
            return input_fingerprint([*options, *[str(i) for i in self.skipped], self.origin])
        return input_fingerprint([*options, *[str(i) for i in self.skipped], *(
            [c.to_dict(), [file_identity(s.source) for s in c.recording.sources]]
            for c in self.cuts or [])])


@dataclass
class ShardResult:
    """What :func:`write_shard` wrote: the number and ids of its utterances, what it
    skipped, and whether the shard holds a skip record (items left out)."""

    index: int
    num_cuts: int
    skip_report: SkipReport
    ids: List[str] = field(default_factory=list)
    with_skips: bool = False


def write_shard(job: ShardJob, out_dir: str, audio_format: str,
                policy: ReadPolicy) -> ShardResult:
    """Write one output shard (runs in a pool worker), reading its input as ``policy``
    says. Atomic: nothing appears in ``out_dir`` until the whole shard is written; what
    was skipped is recorded in it and in the result's report, the job's own (the parent
    merges it), never ``policy``'s."""
    policy = policy.replace(skip_report=SkipReport())
    report = policy.skip_report
    remote = is_remote(out_dir)
    if remote:  # written locally on the worker, then uploaded
        tmp = Path(tempfile.mkdtemp(prefix=f"wenet-lhotse-shard-{job.index:06d}-"))
    else:
        tmp = partial_dir(out_dir) / f"shard-{job.index:06d}-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    if job.tar is not None:
        cuts: Iterable[Cut] = read_one_tar(job.tar, policy=policy)
    else:
        cuts = job.cuts or []
    suffix = f".{job.index:06d}"
    if audio_format == "copy":
        writer: SharWriter = CopyingSharWriter(str(tmp), shard_suffix=suffix)
    else:
        fields = {"recording": "flac" if audio_format == "lossless" else audio_format}
        writer = SharWriter(tmp, fields=fields, shard_size=None, shard_suffix=suffix)
        if audio_format == "lossless":
            writer.writers["recording"] = LosslessAudioTarWriter(
                f"{tmp}/recording{suffix}.tar", shard_size=None)
    audio_writer = writer.writers["recording"]
    lines = iter(job.lines or [])
    ids: List[str] = []
    try:
        with writer:
            for cut in cuts:
                if job.tar is not None:
                    where = {"source": job.tar.url, "member": cut.id}
                else:
                    src, line = next(lines)
                    where = {"source": src, "line": line}
                before = audio_writer.tar_writer.num_items_total
                try:
                    check_key(cut.id, **where)  # becomes a tar member name
                    if cut.has_recording and cut.num_samples < 1:  # readers refuse it too
                        raise WenetDataError("segment holds no sample (0-sample audio)",
                                             **where, kind="bad_segment")
                    for name, value in (cut.custom or {}).items():
                        json_value(cut.id, name, value)  # the cuts manifest is JSON
                    writer.write(cut)
                except Exception as err:
                    if audio_writer.tar_writer.num_items_total != before:
                        raise  # half an utterance is in the tar: this shard is lost
                    if not isinstance(err, WenetDataError):
                        err = WenetDataError(
                            f"cannot convert utterance {cut.id!r}: {short_error(err)}", **where,
                            kind="bad_audio" if not isinstance(err, ValueError) else "invalid")
                    policy.handle(err)
                    continue
                ids.append(cut.id)
        cuts_tmp, tar_tmp = shard_paths(tmp, job.index)
        if not (cuts_tmp.exists() and tar_tmp.exists()):
            empty_shard(cuts_tmp, tar_tmp)  # nothing readable: the shard exists, empty
        skipped = job.skipped + report.items
        write_record(cuts_tmp, make_record(skipped) if skipped else None, job.input_id)
        # Audio first, manifest last: a manifest in OUT means its tar is complete.
        with commit():  # never after the parent is gone (a killed run writes nothing)
            if remote:
                cuts_url, tar_url = remote_shard_urls(out_dir, job.index)
                remote_put(str(tar_tmp), tar_url)
                remote_put(str(cuts_tmp), cuts_url)
            else:
                cuts_out, tar_out = shard_paths(out_dir, job.index)
                os.replace(tar_tmp, tar_out)
                os.replace(cuts_tmp, cuts_out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return ShardResult(job.index, len(ids), report, ids, bool(skipped))


def _raw_jobs(items: Iterable[Tuple[Union[Cut, SkippedItem], str, int]],
              size: int) -> Iterator[ShardJob]:
    """Shard ``i``: non-empty input lines ``[i * size, (i + 1) * size)``, skipped or not."""
    index, count = 0, 0
    job = ShardJob(index, cuts=[], lines=[])
    for item, path, line in items:
        if isinstance(item, SkippedItem):
            job.skipped.append(item)
        else:
            job.cuts.append(item)
            job.lines.append((path, line))
        count += 1
        if count == size:
            yield job
            index, count = index + 1, 0
            job = ShardJob(index, cuts=[], lines=[])
    if count:
        yield job


def _shard_list_jobs(data_lists: Sequence[Pathlike], policy: ReadPolicy) -> List[ShardJob]:
    """One job per non-empty line of the shard list(s); a line that is bad (e.g. a
    refused ``pipe:``) keeps its place as an empty shard recording why."""
    jobs: List[ShardJob] = []
    for lst in data_lists:
        bad = SkipReport()
        entries = read_shard_entries([str(lst)], policy=policy.replace(skip_report=bad))
        policy.skip_report.extend(bad.items)
        at_line = {e.line: ShardJob(0, tar=e) for e in entries}
        at_line.update({item.line: ShardJob(0, skipped=[item]) for item in bad})
        for line in sorted(at_line):
            at_line[line].index = len(jobs)
            jobs.append(at_line[line])
    return jobs


def iter_jobs(
    data_lists: Sequence[Pathlike],
    data_type: str,
    shard_size: Optional[int],
    policy: ReadPolicy,
    wav_root: Optional[Pathlike],
    probe_workers: int,
    cluster: Optional[str] = None,
) -> Tuple[Iterator[ShardJob], Optional[int]]:
    """Jobs for every output shard, and their number when known upfront; bad input
    raised or recorded in ``policy``'s skip report."""
    if get_kind(data_type).lists_tars:  # a list of tars: one Shar shard per tar
        jobs = _shard_list_jobs(data_lists, policy)
        return iter(jobs), len(jobs)
    if not get_kind(data_type).wenet:
        return _kind_jobs(data_lists, data_type, shard_size or 1000, policy, wav_root), None
    from wenet_lhotse.convert.raw import iter_raw_cuts_with_lines

    items = iter_raw_cuts_with_lines([str(p) for p in data_lists], wav_root=wav_root,
                                     policy=policy,
                                     num_workers=probe_workers, cluster=cluster,
                                     yield_skips=True)
    return _raw_jobs(items, shard_size or 1000), None


def _kind_jobs(data_lists: Sequence[Pathlike], data_type: str, size: int, policy: ReadPolicy,
               wav_root: Optional[Pathlike]) -> Iterator[ShardJob]:
    """Any other kind (Parquet, a cuts manifest, ...): shard ``i`` holds its cuts
    ``[i * size, (i + 1) * size)``, read lazily in the caller (bad items raise or are
    recorded in ``policy``'s skip report as the kind's reader does)."""
    index = 0
    for path in map(str, data_lists):
        cuts = get_kind(data_type).open([path], policy, wav_root=wav_root)
        chunk: List[Cut] = []
        for cut in cuts:
            chunk.append(cut)
            if len(chunk) == size:
                yield _kind_job(index, path, chunk)
                index, chunk = index + 1, []
        if chunk:
            yield _kind_job(index, path, chunk)
            index += 1


def _kind_job(index: int, path: str, cuts: List[Cut]) -> ShardJob:
    origin = [file_identity(path) if not os.path.isdir(path) else [path],
              cuts[0].id, cuts[-1].id, len(cuts)]
    return ShardJob(index, cuts=cuts, lines=[(path, None)] * len(cuts), origin=origin)
