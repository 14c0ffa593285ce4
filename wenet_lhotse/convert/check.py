"""Read a data source completely, decoding all audio, and list every problem.

Problems found by the WeNet readers (bad JSON, missing fields or files,
unpaired tar members, duplicate keys, ...) come from their fault-tolerant mode;
audio that has a valid header but fails to decode (or decodes to nothing, or to NaN
or infinite samples) is found here, and so are Shar shards written while items of
their input were skipped (:mod:`.shar_state`). Each problem names the file and line
(lists, manifests) or the tar and member (shards, Shar). Nothing from the data is run:
``pipe:`` lines and ``command`` audio sources are reported, unless ``allow_pipe``.
"""

from __future__ import annotations

import functools
import json
import logging
from dataclasses import dataclass, field
from typing import Dict, Iterator, List, Optional, Tuple

import numpy as np
from lhotse.cut import Cut
from lhotse.utils import Pathlike

from wenet_lhotse.convert.executor import map_tasks
from wenet_lhotse.convert.shar_state import read_record
from wenet_lhotse.errors import SkipReport, WenetDataError, short_error
from wenet_lhotse.formats.keyset import KeySet
from wenet_lhotse.formats.raw_list import read_raw_list
from wenet_lhotse.formats.shard_reader import ShardEntry, read_one_tar, read_shard_entries
from wenet_lhotse.sources.detect import detect_input_kind
from wenet_lhotse.sources.manifest import iter_manifest
from wenet_lhotse.sources.shar_dir import shar_files

logger = logging.getLogger(__name__)


@dataclass
class ValidationResult:
    """Outcome of :func:`validate`. ``problems`` lists every bad item with its location."""

    path: str
    kind: str
    num_ok: int = 0
    seconds_ok: float = 0.0  # total audio duration of the good utterances (seconds)
    problems: SkipReport = field(default_factory=SkipReport)

    @property
    def ok(self) -> bool:
        return len(self.problems) == 0


def _check_audio(cut: Cut) -> Optional[str]:
    """None when the cut's audio decodes to the advertised number of samples."""
    try:
        audio = cut.load_audio()
    except Exception as err:  # any decoder error is a finding, not a crash
        return f"audio does not decode: {short_error(err)}"
    if audio.shape[-1] == 0:
        return "audio is empty (0 samples)"
    if not np.isfinite(audio).all():
        bad = int(audio.size - np.isfinite(audio).sum())
        return f"audio has {bad} non-finite samples (NaN or Inf)"
    if cut.num_samples is not None and abs(audio.shape[-1] - cut.num_samples) > 1:
        return f"audio has {audio.shape[-1]} samples, header says {cut.num_samples}"
    return None


class _LineFinder:
    """Finds the line of a key in a raw list; the index is built only on first use."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._index: Optional[Dict[str, int]] = None

    def __call__(self, key: str) -> Optional[int]:
        if self._index is None:
            self._index = {}
            with open(self.path, encoding="utf-8", errors="replace") as f:
                for no, line in enumerate(f, 1):
                    try:
                        k = json.loads(line).get("key")
                    except (json.JSONDecodeError, AttributeError, RecursionError):
                        continue
                    self._index.setdefault(k, no)
        return self._index.get(key)


@dataclass
class _Checked:
    """What one task found in one tar or Shar shard: per cut ``(id, source, member,
    problem or None, duration in seconds)``, in order, and the reader's problems."""

    cuts: List[Tuple[str, str, Optional[str], Optional[str], float]]
    problems: SkipReport


def _check_tar(tar: ShardEntry, allow_pipe: bool = False) -> _Checked:
    """Decode every utterance of one WeNet tar (a task)."""
    problems = SkipReport(log=False)
    cuts = [(c.id, tar.url, c.id, _check_audio(c), c.duration)
            for c in read_one_tar(tar, strict=False, skip_report=problems,
                                  allow_pipe=allow_pipe)]
    return _Checked(cuts, problems)


def _check_shar_shard(fields: Dict[str, List[str]]) -> _Checked:
    """Decode every utterance of one Shar shard (a task); a broken tar or manifest
    ends the shard with one problem."""
    from lhotse import CutSet

    problems = SkipReport(log=False)
    tar_name = fields["recording"][0]
    record = read_record(fields["cuts"][0])
    if record is not None:
        kinds = ", ".join(f"{k}: {v}" for k, v in sorted(record.get("kinds", {}).items()))
        problems.add(WenetDataError(
            f"shard written with {record.get('skipped')} input items skipped ({kinds}); "
            "fix the input and run the import again to rewrite it", fields["cuts"][0],
            kind="incomplete_shard"), log=False)
    cuts = []
    try:
        for c in CutSet.from_shar(fields=fields):
            cuts.append((c.id, tar_name, c.id, _check_audio(c), c.duration))
    except Exception as err:
        problems.add(WenetDataError(f"shard unreadable: {type(err).__name__}: {err}",
                                    tar_name, kind="truncated"), log=False)
    return _Checked(cuts, problems)


def validate(path: Pathlike, *, progress: bool = False, num_jobs: int = 1,
             cluster: Optional[str] = None, allow_pipe: bool = False) -> ValidationResult:
    """Read ``path`` (raw list, shard list, cuts manifest or Shar directory) completely,
    decoding every utterance's audio. Never raises for bad data: every problem is
    recorded in the result.

    :param progress: show a tqdm bar (unit: utterances).
    :param num_jobs: local processes, one tar or Shar shard each (shard lists, Shar).
    :param cluster: a Dask scheduler address: tars / Shar shards are checked on its
        workers. Problems are listed in input order either way.
    :param allow_pipe: run ``pipe:`` lines and ``command`` audio sources (shell
        commands from the data); without it each is a problem (kind ``"refused"``).
    """
    from tqdm.auto import tqdm

    path = str(path)
    problems = SkipReport(log=False)  # printed by the caller, not logged twice
    try:
        kind = detect_input_kind(path)
    except WenetDataError as err:
        problems.add(err, log=False)
        return ValidationResult(path, "unknown", problems=problems)
    res = ValidationResult(path, kind, problems=problems)
    bar = tqdm(desc="validate", unit="utt", disable=not progress)

    seen = KeySet()  # per-tar/per-shard readers cannot see repeats across tars

    def check(key: str, source: str, member: Optional[str], msg: Optional[str],
              duration: float, line: Optional[int] = None) -> None:
        if kind in ("shard", "shar") and not seen.add(key):
            problems.add(WenetDataError(f"duplicate key {key!r} (seen earlier in this "
                                        "input)", source, line=line, member=member,
                                        kind="duplicate"), log=False)
            bar.update(1)
            return
        if msg is None:
            res.num_ok += 1
            res.seconds_ok += duration
        else:
            problems.add(WenetDataError(f"{key!r}: {msg}", source, line=line, member=member,
                                        kind="bad_audio"), log=False)
        bar.update(1)

    try:
        if kind == "raw":
            find = _LineFinder(path)
            for cut in read_raw_list([path], strict=False, skip_report=problems):
                msg = _check_audio(cut)
                if msg is None:
                    res.num_ok += 1
                    res.seconds_ok += cut.duration
                else:
                    problems.add(WenetDataError(
                        f"{cut.id!r} ({cut.recording.sources[0].source}): {msg}", path,
                        line=find(cut.id), kind="bad_audio"), log=False)
                bar.update(1)
        elif kind == "cuts":
            _validate_manifest(path, problems, check, allow_pipe)
        else:
            jobs = (read_shard_entries([path], strict=False, skip_report=problems,
                                       allow_pipe=allow_pipe) if kind == "shard"
                    else _shar_jobs(path, problems))
            task = (functools.partial(_check_tar, allow_pipe=allow_pipe) if kind == "shard"
                    else _check_shar_shard)
            for _, part in map_tasks(task, jobs, num_jobs=num_jobs, cluster=cluster):
                problems.extend(part.problems.items)
                for key, source, member, msg, duration in part.cuts:
                    check(key, source, member, msg, duration)
    finally:
        bar.close()
    if res.num_ok == 0 and not len(problems):
        # WeNet would start training on nothing; an empty input is almost always a mistake.
        problems.add(WenetDataError("no utterances in it", path, kind="empty"), log=False)
    return res


def _validate_manifest(path: str, problems: SkipReport, check, allow_pipe: bool) -> None:
    seen = set()
    for item, no in iter_manifest(path, allow_pipe):
        if isinstance(item, WenetDataError):
            problems.add(item, log=False)
        elif item.id in seen:
            problems.add(WenetDataError(f"duplicate cut id {item.id!r}", path, line=no,
                                        kind="duplicate"), log=False)
        else:
            seen.add(item.id)
            check(item.id, path, None, _check_audio(item), item.duration, line=no)


def _shar_jobs(in_dir: str, problems: SkipReport) -> Iterator[Dict[str, List[str]]]:
    """The fields of each complete Shar shard, in order; unpaired files are problems."""
    files = shar_files(in_dir)
    tars = {f: {i: p for i, p in by_index.items() if p.endswith(".tar")}
            for f, by_index in files.items() if f != "cuts"}
    cut_files = {i: p for i, p in files.get("cuts", {}).items() if ".jsonl" in p}
    for i, cuts_path in sorted(cut_files.items()):
        fields = {"cuts": [cuts_path]}
        fields.update({f: [by_index[i]] for f, by_index in tars.items() if i in by_index})
        if "recording" not in fields:
            problems.add(WenetDataError(f"no recording.{i:06d}.tar next to it", cuts_path,
                                        kind="unpaired"), log=False)
            continue
        yield fields
    others = {i for by_index in tars.values() for i in by_index} - set(cut_files)
    for i in sorted(others):
        problems.add(WenetDataError("tar without its cuts manifest", str(in_dir),
                                    member=f"*.{i:06d}.tar", kind="unpaired"), log=False)
