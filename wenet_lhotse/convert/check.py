"""Read a data source completely, decoding all audio, and list every problem.

Problems found by the WeNet readers (bad JSON, missing fields or files,
unpaired tar members, duplicate keys, ...) come from their fault-tolerant mode;
audio that has a valid header but fails to decode (or decodes to nothing, or to NaN
or infinite samples) is found here, and so are Shar shards written while items of
their input were skipped (:mod:`.shar_state`). Each problem names the file and line
(lists, manifests) or the tar and member (shards, Shar). Nothing from the data is run:
``pipe:`` lines and ``command`` audio sources are reported, unless the read policy
allows them.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

import numpy as np
from lhotse.cut import Cut
from lhotse.utils import Pathlike

from wenet_lhotse.convert.executor import map_tasks
from wenet_lhotse.errors import SkipReport, WenetDataError, short_error
from wenet_lhotse.formats.keyset import KeySet
from wenet_lhotse.io.policy import ReadPolicy
from wenet_lhotse.sources.detect import detect_input_kind
from wenet_lhotse.sources.registry import get_kind
from wenet_lhotse.sources.units import WorkUnit

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


@dataclass
class _Checked:
    """What one task found in one work unit: per cut ``(id, label, source, member, line,
    problem or None, duration in seconds)``, in order, and the reader's problems."""

    cuts: List[Tuple[str, str, str, Optional[str], Optional[int], Optional[str], float]]
    problems: SkipReport


def _check_unit(unit: WorkUnit, policy: ReadPolicy) -> _Checked:
    """Decode every utterance of one work unit (a task); a unit that breaks off is one
    problem (``truncated``) after the cuts read before it."""
    reader = get_kind(unit.kind)
    problems = SkipReport(log=False)
    for err in reader.audit_unit(unit):
        problems.add(err, log=False)
    policy = policy.replace(strict=False, skip_report=problems)
    cuts = []
    try:
        for c in reader.read_unit(unit, policy, audio=True):
            cuts.append((c.cut.id, reader.cut_label(c.cut), c.source, c.member, c.line,
                         _check_audio(c.cut), c.cut.duration))
    except Exception as err:
        problems.add(WenetDataError(f"{reader.unit_name} unreadable: {type(err).__name__}: "
                                    f"{err}", unit.label, kind="truncated"), log=False)
    return _Checked(cuts, problems)


def validate(path: Pathlike, *, progress: bool = False, num_jobs: int = 1,
             cluster: Optional[str] = None,
             policy: Optional[ReadPolicy] = None) -> ValidationResult:
    """Read ``path`` (any input kind that is detected: raw list, shard list, cuts
    manifest, Shar directory, ...) completely, decoding every utterance's audio. Never
    raises for bad data: every problem is recorded in the result.

    The input is read as its kind's work units (:mod:`wenet_lhotse.sources.units`):
    tars and Shar shards are read by the tasks; lists and manifests here, their cuts
    decoded by the tasks.

    :param progress: show a tqdm bar (unit: utterances).
    :param num_jobs: local processes decoding the work units.
    :param cluster: a Dask scheduler address: the units are checked on its workers.
        Problems are listed in input order either way.
    :param policy: what may be opened (shell commands from the data: without the
        policy's permission each is a problem, kind ``"refused"``; URL protocols, network
        limits); its ``strict`` and ``skip_report`` are not used: validate never raises
        for bad data and lists every problem in the result.
    """
    from tqdm.auto import tqdm

    path = str(path)
    problems = SkipReport(log=False)  # printed by the caller, not logged twice
    policy = (policy or ReadPolicy()).replace(strict=False, skip_report=problems)
    try:
        kind = detect_input_kind(path)
        reader = get_kind(kind)
        units, _ = reader.work_units(
            path, policy, audio=True,
            chunk_size=1)  # one cut per unit: problems stay in input order
    except WenetDataError as err:
        problems.add(err, log=False)
        return ValidationResult(path, "unknown", problems=problems)
    res = ValidationResult(path, kind, problems=problems)
    find = reader.line_finder(path)
    # a reader that sees one unit at a time cannot see repeats across units
    seen = KeySet() if reader.keys_repeat_across_units else None
    task = functools.partial(_check_unit, policy=policy.replace(skip_report=None))
    with tqdm(desc="validate", unit="utt", disable=not progress) as bar:
        for _, part in map_tasks(task, units, num_jobs=num_jobs, cluster=cluster):
            problems.extend(part.problems.items)
            for key, label, source, member, line, msg, duration in part.cuts:
                bar.update(1)
                if seen is not None and not seen.add(key):
                    problems.add(WenetDataError(
                        f"duplicate key {key!r} (seen earlier in this input)", source,
                        line=line, member=member, kind="duplicate"), log=False)
                elif msg is None:
                    res.num_ok += 1
                    res.seconds_ok += duration
                else:
                    problems.add(WenetDataError(
                        f"{label}: {msg}", source, member=member,
                        line=line if line is not None else find(key),
                        kind="bad_audio"), log=False)
    if res.num_ok == 0 and not len(problems):
        # WeNet would start training on nothing; an empty input is almost always a mistake.
        problems.add(WenetDataError("no utterances in it", path, kind="empty"), log=False)
    return res
