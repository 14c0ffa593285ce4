"""Corpus statistics from metadata only (no audio is decoded): utterance count,
hours, and the distributions of duration (seconds) and text length (characters)."""

from __future__ import annotations

import functools
import logging
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np
from lhotse.utils import Pathlike

from wenet_lhotse.convert.executor import map_tasks
from wenet_lhotse.errors import SkipReport, WenetDataError
from wenet_lhotse.io.policy import ReadPolicy
from wenet_lhotse.sources.detect import detect_input_kind
from wenet_lhotse.sources.registry import get_kind
from wenet_lhotse.sources.units import WorkUnit

logger = logging.getLogger(__name__)

#: Percentiles reported by :func:`describe`.
PERCENTILES = (5, 25, 50, 75, 95, 99)


def describe(values: np.ndarray) -> Dict[str, float]:
    """min / mean / percentiles (``p5`` ... ``p99``) / max of ``values`` (zeros when empty)."""
    if len(values) == 0:
        return {"min": 0.0, "mean": 0.0, **{f"p{p}": 0.0 for p in PERCENTILES}, "max": 0.0}
    out = {"min": float(values.min()), "mean": float(values.mean())}
    for p, v in zip(PERCENTILES, np.percentile(values, PERCENTILES)):
        out[f"p{p}"] = float(v)
    out["max"] = float(values.max())
    return out


@dataclass
class CorpusStats:
    """Statistics of one data source. Durations in seconds, text lengths in characters."""

    path: str
    kind: str
    durations: np.ndarray
    text_lengths: np.ndarray
    num_speakers: int = 0
    skipped: SkipReport = field(default_factory=SkipReport)

    @property
    def num_utterances(self) -> int:
        return len(self.durations)

    @property
    def hours(self) -> float:
        return float(self.durations.sum()) / 3600.0

    def summary(self) -> Dict[str, object]:
        return {
            "path": self.path,
            "kind": self.kind,
            "utterances": self.num_utterances,
            "hours": self.hours,
            "speakers": self.num_speakers,
            "duration_s": describe(self.durations),
            "text_chars": describe(self.text_lengths),
            "skipped": len(self.skipped),
        }

    def format(self) -> str:
        """A human-readable table."""
        lines = [
            f"{self.path} ({self.kind})",
            f"  utterances : {self.num_utterances}",
            f"  hours      : {self.hours:.3f}",
            f"  speakers   : {self.num_speakers}",
        ]
        names = ["min", "mean", *[f"p{p}" for p in PERCENTILES], "max"]
        lines.append("  " + " " * 13 + "".join(f"{n:>9}" for n in names))
        for label, vals, fmt in (("duration (s)", self.durations, "{:9.2f}"),
                                 ("text (chars)", self.text_lengths, "{:9.1f}")):
            d = describe(vals)
            lines.append(f"  {label:<13}" + "".join(fmt.format(d[n]) for n in names))
        if len(self.skipped):
            lines.append(f"  skipped    : {self.skipped.summary()}")
        return "\n".join(lines)


def _metadata(cut) -> Tuple[float, int, List[str]]:
    """(duration in seconds, text length in characters, speakers) of one cut."""
    return (cut.duration, sum(len(s.text or "") for s in cut.supervisions),
            [s.speaker for s in cut.supervisions if s.speaker is not None])


def _unit_metadata(unit: WorkUnit, policy: ReadPolicy) -> Tuple[list, SkipReport]:
    """The metadata of every utterance of one work unit (a task: a tar must be read
    through to see its members); its skips come back in a report of their own."""
    local = policy.replace(skip_report=SkipReport(log=False))
    return [_metadata(c.cut) for c in get_kind(unit.kind).read_unit(
        unit, local, audio=False)], local.skip_report


def corpus_stats(path: Pathlike, *, progress: bool = False, num_jobs: int = 1,
                 cluster: Optional[str] = None,
                 policy: Optional[ReadPolicy] = None) -> CorpusStats:
    """Statistics of any input kind that is detected (raw list, shard list, cuts
    manifest, Shar directory, ...).

    Reads metadata only, as its kind's work units (:mod:`wenet_lhotse.sources.units`):
    raw lists probe audio headers, Shar reads just its cut manifests; shard lists must
    stream their tars. Bad items are skipped and counted unless the policy is
    ``strict`` (default: skipped; skips land in the result's report); a manifest
    cut short is an error (the figures would cover an unknown part of it).

    :param num_jobs: local processes reading the units (shard lists: one tar each) or
        the input itself (raw lists: header probing).
    :param cluster: a Dask scheduler address: the same work on its workers.
    :param policy: how to read (:class:`~wenet_lhotse.io.policy.ReadPolicy`: ``strict``,
        ``pipe:`` lines of shard lists, URL protocols, network limits).
    """
    from tqdm.auto import tqdm

    report = SkipReport()
    kind = detect_input_kind(path)
    reader = get_kind(kind)
    policy = (policy or ReadPolicy(strict=False)).replace(skip_report=report)
    parallel = num_jobs > 1 or bool(cluster)
    mapper = functools.partial(map_tasks, num_jobs=num_jobs, cluster=cluster)
    units, _ = reader.work_units(str(path), policy, audio=False,
                                 mapper=mapper if parallel else None)
    if reader.reads_in_caller:  # the cuts are read already: nothing left to farm out
        num_jobs, cluster = 1, None
    durations = array("d")  # 8 bytes per utterance
    text_lengths = array("q")
    speakers = set()
    task = functools.partial(_unit_metadata, policy=policy.replace(skip_report=None))
    with tqdm(desc="stats", unit="utt", disable=not progress) as bar:
        for _, (items, skips) in map_tasks(task, units, num_jobs=num_jobs, cluster=cluster):
            report.extend(skips.items)
            for d, n, spk in items:
                durations.append(d)
                text_lengths.append(n)
                speakers.update(spk)
            bar.update(len(items))
    fatal = [i for i in report if i.kind in reader.stats_fatal]
    if fatal:  # figures over an unknown part of the input would mislead
        i = fatal[0]
        raise WenetDataError(i.message, i.source, line=i.line, member=i.member, kind=i.kind)
    return CorpusStats(str(path), kind, np.frombuffer(durations, dtype=np.float64),
                       np.frombuffer(text_lengths, dtype=np.int64), len(speakers), report)


def plot_stats(stats: CorpusStats, out_png: Pathlike, bins: int = 50) -> Path:
    """Write histograms of duration and text length to a PNG (needs matplotlib)."""
    try:
        # Figure + Agg canvas, not pyplot: no global backend switch, no GUI.
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as err:
        raise ImportError("plotting needs matplotlib: pip install matplotlib "
                          "(or, in the wenet-lhotse clone: pip install -e '.[plot]')") from err
    fig = Figure(figsize=(10, 4))
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, 2)
    axes[0].hist(stats.durations, bins=bins, color="tab:blue")
    axes[0].set_xlabel("duration (s)")
    axes[0].set_ylabel("utterances")
    axes[1].hist(stats.text_lengths, bins=bins, color="tab:orange")
    axes[1].set_xlabel("text length (characters)")
    fig.suptitle(f"{Path(stats.path).name}: {stats.num_utterances} utterances, "
                 f"{stats.hours:.2f} h")
    fig.tight_layout()
    out = Path(out_png)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    return out
