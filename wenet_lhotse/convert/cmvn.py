"""WeNet's ``global_cmvn`` (``tools/compute_cmvn_stats.py``) from any input we read.

The output is the JSON WeNet's tool writes and ``cmvn_conf: {is_json_cmvn: true}``
loads: ``{"mean_stat": [D floats], "var_stat": [D floats], "frame_num": int}``, the
per-dimension sums of the features and of their squares over every frame of every
utterance, and the number of frames.

What is computed, as WeNet's tool does: each utterance's first channel, resampled to
``resample_conf.resample_rate`` when the yaml has a ``resample_conf`` (else kept at its
own rate), Kaldi fbank with ``dither=0`` and ``energy_floor=0`` on ``samples * 32768``.
No speed perturbation, no spec augmentation.

Where it differs from WeNet's tool, and why:

* The features are the ones training computes: the yaml's whole ``fbank_conf``
  (``num_mel_bins``, ``frame_length``, ``frame_shift``, ``window_type``) and its
  ``feats_type`` (``mfcc_conf``, ``log_mel_spectrogram_conf`` too), dither forced to 0.
  WeNet's tool reads only ``num_mel_bins`` and keeps Kaldi's 25/10 ms povey frames; the
  two agree for every yaml that keeps those (all of WeNet's recipes).
* Inputs: a WeNet raw list, shard list, Lhotse cuts manifest, Shar directory or any
  other detected input kind, read as its work units (:mod:`wenet_lhotse.sources.units`)
  (WeNet's tool reads a Kaldi ``wav.scp``; ``compute_shard_cmvn_stats.py`` shards).
* Sums are accumulated in float64 per utterance (WeNet: float32 per batch of 20).
* Bad items raise :class:`WenetDataError` naming file and line / tar and member, or with
  a fault-tolerant policy are skipped and counted (WeNet's tool stops with a traceback).

The work is split into :class:`CmvnChunk` objects (the kind's work units: a slice of
cuts, one tar, one Shar shard), each turned into a :class:`ChunkResult` by the
picklable :func:`chunk_stats`, so any executor with ``submit`` (a local process pool
here) can run them.
"""

from __future__ import annotations

import functools
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple, Union

import numpy as np

from wenet_lhotse.convert.executor import map_tasks
from wenet_lhotse.errors import SkippedItem, SkipReport, WenetDataError
from wenet_lhotse.io.policy import ReadPolicy
from wenet_lhotse.sources.registry import get_kind
from wenet_lhotse.sources.units import UnitCut, WorkUnit

logger = logging.getLogger(__name__)

Pathlike = Union[str, os.PathLike]

#: Cuts per chunk for raw lists and cuts manifests (tars and Shar shards are one chunk each).
DEFAULT_CHUNK_SIZE = 64


@dataclass
class CmvnConfig:
    """The feature recipe: an extractor (dither forced to 0 when applied) and the rate
    (Hz) audio is resampled to first (``None``: each utterance keeps its own rate)."""

    extractor: Any
    resample_rate: Optional[int] = None

    @classmethod
    def from_wenet(cls, dataset_conf: Optional[Mapping[str, Any]]) -> CmvnConfig:
        """From WeNet's ``dataset_conf`` (see the module docstring)."""
        from wenet_lhotse.features import extractor_from_wenet_conf

        conf = dict(dataset_conf or {})
        rate = None
        if conf.get("resample_conf") is not None:
            # processor.resample's default when the section leaves the key out
            rate = int((conf["resample_conf"] or {}).get("resample_rate", 16000))
        return cls(extractor=extractor_from_wenet_conf(conf), resample_rate=rate)


@dataclass
class CmvnStats:
    """Sums over frames: ``mean_stat`` (sum of x), ``var_stat`` (sum of x^2), float64
    arrays of the feature dimension; ``frame_num`` frames in ``num_utts`` utterances."""

    mean_stat: Optional[np.ndarray] = None
    var_stat: Optional[np.ndarray] = None
    frame_num: int = 0
    num_utts: int = 0

    def add_features(self, feats: np.ndarray) -> None:
        """Add one utterance's ``(frames, dim)`` features."""
        x = np.asarray(feats, dtype=np.float64)
        s, s2 = x.sum(axis=0), np.square(x).sum(axis=0)
        if self.mean_stat is None:
            self.mean_stat, self.var_stat = s, s2
        else:
            self.mean_stat = self.mean_stat + s
            self.var_stat = self.var_stat + s2
        self.frame_num += int(x.shape[0])
        self.num_utts += 1

    def merge(self, other: CmvnStats) -> CmvnStats:
        if other.mean_stat is not None:
            if self.mean_stat is None:
                self.mean_stat, self.var_stat = other.mean_stat.copy(), other.var_stat.copy()
            else:
                if self.mean_stat.shape != other.mean_stat.shape:
                    raise ValueError(f"feature dims differ: {self.mean_stat.shape} vs "
                                     f"{other.mean_stat.shape}")
                self.mean_stat = self.mean_stat + other.mean_stat
                self.var_stat = self.var_stat + other.var_stat
        self.frame_num += other.frame_num
        self.num_utts += other.num_utts
        return self

    def to_wenet_json(self) -> Dict[str, Any]:
        """WeNet's ``global_cmvn`` dict."""
        if self.mean_stat is None:
            raise ValueError("no frames: nothing to normalise with")
        return {"mean_stat": [float(v) for v in self.mean_stat],
                "var_stat": [float(v) for v in self.var_stat],
                "frame_num": int(self.frame_num)}

    def mean_std(self) -> Tuple[np.ndarray, np.ndarray]:
        """Per-dimension mean and standard deviation (WeNet's ``load_cmvn`` floors the
        variance at 1e-20)."""
        mean = self.mean_stat / self.frame_num
        var = np.maximum(self.var_stat / self.frame_num - mean ** 2, 1e-20)
        return mean, np.sqrt(var)


#: One unit of work, picklable: a work unit of the input's kind
#: (:class:`~wenet_lhotse.sources.units.WorkUnit`: a slice of cuts, one tar, one Shar shard).
CmvnChunk = WorkUnit


@dataclass
class ChunkResult:
    stats: CmvnStats
    skipped: List[SkippedItem] = field(default_factory=list)


def _audio_source(item: UnitCut) -> Tuple[str, Optional[str], Optional[int]]:
    """``(source, member, line)`` for an error message about a cut's audio: its file, or
    where the cut is (the tar / Shar shard it came from and the cut id, or the list or
    manifest and line)."""
    rec = getattr(item.cut, "recording", None)
    if rec is not None and rec.sources and rec.sources[0].type == "file":
        return str(rec.sources[0].source), None, None
    return item.source, item.member, item.line


def cut_features(cut: Any, config: CmvnConfig) -> np.ndarray:
    """``(frames, dim)`` features of one cut, as WeNet's tool computes them."""
    from wenet_lhotse.features.augment import resample

    samples = np.asarray(cut.load_audio(), dtype=np.float32)
    if samples.ndim == 2:
        samples = samples[0]  # Kaldi's fbank (channel=-1) reads channel 0, as WeNet's tool
    sr = int(cut.sampling_rate)
    if config.resample_rate and sr != config.resample_rate:
        samples = resample(samples, sr, config.resample_rate)
        sr = config.resample_rate
    return config.extractor.compute([samples], sr, dither=0.0)[0].numpy()


def chunk_stats(chunk: CmvnChunk, config: CmvnConfig,
                policy: Optional[ReadPolicy] = None) -> ChunkResult:
    """The statistics of one chunk (picklable; runs in a worker process).

    A cut whose audio cannot be read or featurised raises :class:`WenetDataError`
    naming its audio file (or tar and member); with a fault-tolerant ``policy`` it is
    skipped and returned in ``ChunkResult.skipped`` instead (the chunk records into a
    report of its own, which the caller merges)."""
    stats = CmvnStats()
    policy = (policy or ReadPolicy()).replace(skip_report=SkipReport(log=False))
    report, strict = policy.skip_report, policy.strict
    for item in get_kind(chunk.kind).read_unit(chunk, policy, audio=True):
        cut = item.cut
        try:
            stats.add_features(cut_features(cut, config))
        except Exception as err:
            source, member, line = _audio_source(item)
            werr = err if isinstance(err, WenetDataError) else WenetDataError(
                f"cut {cut.id!r}: cannot compute features: {type(err).__name__}: {err}",
                source, line=line, member=member, kind="bad_audio")
            if strict:
                raise werr from err
            report.add(werr)
    return ChunkResult(stats, list(report))


def iter_chunks(
    path: Pathlike,
    *,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    policy: Optional[ReadPolicy] = None,
    wav_root: Optional[Pathlike] = None,
) -> Tuple[Iterator[CmvnChunk], Optional[int]]:
    """``(chunks, number of chunks or None when not known up front)`` for ``path``: the
    work units of its kind (told apart by content; :mod:`wenet_lhotse.sources.units`)."""
    from wenet_lhotse.sources import detect_input_kind

    policy = policy or ReadPolicy()
    return get_kind(detect_input_kind(path)).work_units(
        str(path), policy, audio=True, chunk_size=chunk_size, wav_root=wav_root)


def _chunk_task(chunk: CmvnChunk, config: CmvnConfig, policy: ReadPolicy) -> ChunkResult:
    """:func:`chunk_stats` as a task. One torch thread: the pool (or cluster) is the
    parallelism, per-utterance fbank gains nothing from threads, and a forked child must
    not enter the OpenMP pool its parent had started (it would hang)."""
    import torch

    torch.set_num_threads(1)
    return chunk_stats(chunk, config, policy)


def compute_cmvn(
    path: Pathlike,
    dataset_conf: Optional[Mapping[str, Any]] = None,
    *,
    config: Optional[CmvnConfig] = None,
    num_jobs: int = 1,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    policy: Optional[ReadPolicy] = None,
    wav_root: Optional[Pathlike] = None,
    progress: bool = False,
    cluster: Optional[str] = None,
) -> CmvnStats:
    """Global CMVN statistics of every utterance in ``path``.

    :param dataset_conf: WeNet's ``dataset_conf`` (the feature recipe, see the module
        docstring); ignored when ``config`` is given.
    :param num_jobs: worker processes (1: in this process). Chunks are submitted as the
        input is read, at most ``2 * num_jobs`` at a time.
    :param chunk_size: cuts per chunk for raw lists and cuts manifests.
    :param policy: how inputs are read: strict (WeNet's tool: the first bad item
        raises) or skip-and-count into its ``skip_report``; URL protocols, limits, the
        pipe opt-in.
    :param progress: a tqdm bar (unit: utterances).
    :param cluster: a Dask scheduler address: chunks run on its workers (which must see
        the input paths); the statistics are merged here.
    """
    import torch
    from tqdm.auto import tqdm

    config = config or CmvnConfig.from_wenet(dataset_conf)
    policy = policy or ReadPolicy()
    report = policy.skip_report
    chunks, _ = iter_chunks(path, chunk_size=chunk_size, policy=policy, wav_root=wav_root)
    total = CmvnStats()
    bar = tqdm(unit="utt", desc="cmvn", disable=not progress)

    def done(res: ChunkResult) -> None:
        total.merge(res.stats)
        if res.skipped:
            report.extend(res.skipped)
            for item in res.skipped:
                logger.warning("skipped %s", item)
        bar.update(res.stats.num_utts + len(res.skipped))
        bar.set_postfix(frames=total.frame_num, skipped=len(report))

    threads = torch.get_num_threads()
    # each chunk records into its own report (merged here): the parent's stays here
    task = functools.partial(_chunk_task, config=config,
                             policy=policy.replace(skip_report=None))
    try:
        # bounded: the input is streamed, not loaded; merged as chunks complete
        for _, res in map_tasks(task, chunks, num_jobs=num_jobs, cluster=cluster,
                                ordered=False):
            done(res)
    finally:
        torch.set_num_threads(threads)
        bar.close()
    if total.frame_num == 0:
        raise WenetDataError("no frames computed: no readable utterance in it", str(path),
                             kind="empty")
    logger.info("cmvn %s: %d utterances, %d frames; %s", path, total.num_utts,
                total.frame_num, report.summary())
    return total


def write_cmvn(stats: CmvnStats, out: Pathlike) -> Path:
    """Write WeNet's ``global_cmvn`` JSON atomically (a crash leaves no partial file)."""
    from wenet_lhotse.io.streams import atomic_output

    with atomic_output(out, "w", encoding="utf-8") as f:
        f.write(json.dumps(stats.to_wenet_json()))
    return Path(out)
