"""Sampling constraints that keep WeNet's ``batch_conf`` numbers, for Lhotse's samplers.

Each class implements Lhotse 1.33's ``SamplingConstraint`` interface
(``lhotse/dataset/sampling/base.py``), so it drives Lhotse's bucketing code
(``DynamicBucketingSampler(constraint=...)``, its ``DynamicBucketer`` and
``DurationBatcher``) and our resumable sampler alike:

* :class:`StaticBatchConstraint` -- ``batch_type: static``: exactly ``batch_size``
  utterances per batch (WeNet's ``dataset.batch(batch_size)``).
* :class:`MaxFramesConstraint` -- ``batch_type: dynamic``: ``max_frames_in_batch`` is a
  hard cap on *utterances x longest utterance in frames* (WeNet's ``DynamicBatchWindow``),
  frames counted after resampling and speed perturbation.
* :class:`BucketBatchConstraint` -- ``batch_type: bucket``: WeNet's
  ``bucket_boundaries`` (frames; an utterance of ``L`` frames is in the first bucket
  whose boundary is ``> L``) and ``bucket_batch_sizes``.

Lengths are the ones the feature pipeline will produce (:class:`CutLengths`): the
speed factor of a cut is decided *before* batching from ``(seed, epoch, cut id)`` --
the very draw :class:`~wenet_lhotse.features.pipeline.CutPipeline` makes for that cut
(:func:`~wenet_lhotse.features.pipeline.planned_speed`) -- and
the frame count follows the extractor's own framing (Kaldi ``snip_edges``, Whisper
hop), so a cap holds exactly on the features of every batch.

Where this differs from Lhotse's ``TimeConstraint``/``FixedBucketBatchSizeConstraint``
and why: Lhotse's ``DurationBatcher`` stops *after* adding the cut that makes
``close_to_exceeding()`` true and never puts it back, so ``TimeConstraint`` lets a batch
overshoot its budget when a longer cut comes last (measured: +10.7%). Here
``close_to_exceeding()`` assumes the next cut may be as long as any cut of the batch's
bucket can be: the bucket's upper edge (``duration_bins`` are in seconds after
perturbation), and for the open last bucket the longest cut put into it this epoch
(:meth:`_WenetConstraint.shared_state`, kept in checkpoints so resuming is exact). So no
cut of that bucket can make the batch overshoot. Lengths are in frames after
perturbation, not seconds before it, because that is what WeNet counts and what fills GPU
memory.
"""

from __future__ import annotations

import copy
import math
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
from lhotse.cut import Cut
from lhotse.dataset.sampling.base import SamplingConstraint

# Entries kept in the per-cut caches before they are cleared (recomputing is cheap).
_CACHE_LIMIT = 200_000


# ---------------------------------------------------------------------------- lengths


def _resampled_length(num_samples: int, orig: int, new: int) -> int:
    """Output length of Lhotse's (= torchaudio's) sinc resampler: ``ceil(new * n / orig)``
    with the rates divided by their gcd, rounded through float32 as that code does."""
    if orig == new:
        return num_samples
    g = math.gcd(orig, new)
    return int(math.ceil(np.float32((new // g) * num_samples / (orig // g))))


@dataclass(frozen=True)
class FrameCounter:
    """Number of feature frames for a waveform, as the configured extractor frames it.

    :param kind: ``kaldi`` (fbank/mfcc: Kaldi framing), ``whisper`` (log-mel: hop) or
        ``shift`` (any other extractor: ``round(seconds / frame_shift)``).
    :param resample_to: rate (Hz) the pipeline resamples to first; ``None`` keeps it.
    """

    kind: str = "kaldi"
    resample_to: Optional[int] = 16000
    frame_length_ms: float = 25.0
    frame_shift_ms: float = 10.0
    snip_edges: bool = True
    hop_length: int = 160  # samples (whisper)
    padding: int = 0  # samples appended before the STFT (whisper)
    pad_or_trim_seconds: Optional[float] = None  # whisper's pad_or_trim to max_duration

    @classmethod
    def from_extractor(cls, extractor: Any, resample_to: Optional[int] = 16000
                       ) -> FrameCounter:
        from wenet_lhotse.features.fbank import WenetFbank, WenetMfcc, WhisperLogMel

        cfg = getattr(extractor, "config", None)
        if isinstance(extractor, (WenetFbank, WenetMfcc)):
            return cls("kaldi", resample_to, float(cfg.frame_length), float(cfg.frame_shift),
                       bool(cfg.snip_edges))
        if isinstance(extractor, WhisperLogMel):
            trim = getattr(cfg, "max_duration", 30) if getattr(cfg, "pad_or_trim", False) \
                else None
            return cls("whisper", resample_to, hop_length=int(cfg.hop_length),
                       padding=int(cfg.padding),
                       pad_or_trim_seconds=None if trim is None else float(trim))
        return cls("shift", resample_to, frame_shift_ms=1000.0 * float(extractor.frame_shift))

    @classmethod
    def from_wenet_conf(cls, dataset_conf: Mapping[str, Any]) -> FrameCounter:
        """The counter for the extractor and resampling WeNet's ``dataset_conf`` selects."""
        from wenet_lhotse.features.fbank import extractor_from_wenet_conf

        rate = (dataset_conf.get("resample_conf") or {}).get("resample_rate", 16000)
        return cls.from_extractor(extractor_from_wenet_conf(dict(dataset_conf)), rate)

    def num_samples(self, num_samples: int, sampling_rate: int, speed: float = 1.0) -> int:
        """Samples after resampling and speed perturbation (the pool's order)."""
        rate = int(sampling_rate)
        if self.resample_to and rate != int(self.resample_to):
            num_samples = _resampled_length(num_samples, rate, int(self.resample_to))
            rate = int(self.resample_to)
        if speed != 1.0:  # Lhotse's Speed: resample from round(rate * speed) to rate
            num_samples = _resampled_length(num_samples, int(round(rate * speed)), rate)
        return num_samples

    def rate(self, sampling_rate: int) -> int:
        return int(self.resample_to) if self.resample_to else int(sampling_rate)

    def frames(self, num_samples: int, sampling_rate: int) -> int:
        """Frames for ``num_samples`` samples at ``sampling_rate`` Hz (already resampled)."""
        if self.kind == "kaldi":
            size = int(sampling_rate * self.frame_length_ms * 0.001)
            shift = int(sampling_rate * self.frame_shift_ms * 0.001)
            if self.snip_edges:
                return 0 if num_samples < size else 1 + (num_samples - size) // shift
            return (num_samples + shift // 2) // shift
        if self.kind == "whisper":
            n = num_samples + self.padding
            if self.pad_or_trim_seconds is not None:
                n = int(self.pad_or_trim_seconds * sampling_rate)
            return n // self.hop_length
        return int(round(num_samples / sampling_rate * 1000.0 / self.frame_shift_ms))


@dataclass
class CutLengths:
    """A cut's length after the pipeline's resampling and speed perturbation.

    :param speeds: the speed factors (``None``: no perturbation, e.g. cv).
    :param seed: the feature pipeline's seed (the loader's ``seed``).
    """

    counter: FrameCounter = field(default_factory=FrameCounter)
    speeds: Optional[Tuple[float, ...]] = None
    seed: int = 0
    epoch: int = 0
    _cache: Dict[Tuple[str, float, int], Tuple[int, float]] = field(default_factory=dict,
                                                                      repr=False)

    def set_epoch(self, epoch: int) -> None:
        if int(epoch) != self.epoch:
            self.epoch = int(epoch)
            self._cache.clear()

    def speed(self, cut: Cut) -> float:
        if not self.speeds:
            return 1.0
        from wenet_lhotse.features.pipeline import planned_speed

        return planned_speed(self.seed, self.epoch, cut.id, self.speeds)

    def _lengths(self, cut: Cut) -> Tuple[int, float]:
        key = (cut.id, cut.duration, cut.sampling_rate)  # ids may repeat across sources
        hit = self._cache.get(key)
        if hit is None:
            sr = int(cut.sampling_rate)
            n = self.counter.num_samples(cut.num_samples, sr, self.speed(cut))
            rate = self.counter.rate(sr)
            hit = (self.counter.frames(n, rate), n / rate)
            if len(self._cache) >= _CACHE_LIMIT:
                self._cache.clear()
            self._cache[key] = hit
        return hit

    def frames(self, cut: Cut) -> int:
        """Feature frames of ``cut`` this epoch."""
        return self._lengths(cut)[0]

    def seconds(self, cut: Cut) -> float:
        """Duration of ``cut`` this epoch, after speed perturbation (seconds)."""
        return self._lengths(cut)[1]


# ---------------------------------------------------------------------------- constraints


@dataclass
class _WenetConstraint(SamplingConstraint):
    """Shared bookkeeping: utterance count, longest utterance (frames), the bound on the
    next utterance's length (see the module docstring) and an optional ``max_cuts``.
    Copies share ``lengths`` and the open last bucket's record."""

    lengths: CutLengths = field(default_factory=CutLengths)
    max_cuts: Optional[int] = None
    bins: Optional[List[float]] = None  # sampling buckets' edges (seconds after perturbation)
    num_cuts: int = 0
    longest: int = 0  # frames
    bound: int = 0  # frames: no cut that may still join this batch is longer
    _shared: Dict[str, int] = field(default_factory=dict, repr=False)

    def set_epoch(self, epoch: int) -> None:
        """Lengths change with the epoch's speed factors: call before sampling an epoch."""
        if int(epoch) != self.lengths.epoch:
            self._shared.clear()
        self.lengths.set_epoch(epoch)

    def use_bins(self, bins: Sequence[float]) -> None:
        """The sampler's bucket edges (also learnt from the first :meth:`select_bucket`)."""
        self.bins = [float(b) for b in bins]

    def shared_state(self) -> Dict[str, int]:
        """The longest cut (frames) put into the open last bucket this epoch: a
        checkpoint needs it to bound batches exactly as the original run did."""
        return dict(self._shared)

    def load_shared_state(self, state: Optional[Mapping[str, int]]) -> None:
        self._shared.clear()
        self._shared.update({k: int(v) for k, v in (state or {}).items()})

    def measure_length(self, example: Cut) -> float:
        """Seconds after speed perturbation (what ``duration_bins`` are compared with)."""
        return self.lengths.seconds(example)

    def select_bucket(self, buckets: Any, example: Any = None, example_len: Any = None) -> int:
        if example is None:
            return bisect_left(buckets, example_len)
        if self.bins is None:
            self.use_bins(buckets)
        idx = self._bucket_index(buckets, example)
        if idx >= len(buckets):
            frames = self.lengths.frames(example)
            if frames > self._shared.get("last_max", 0):
                self._shared["last_max"] = frames
        return idx

    def _bucket_index(self, buckets: Any, example: Cut) -> int:
        return bisect_left(buckets, self.measure_length(example))

    def _edge_frames(self, idx: int, example: Cut) -> int:
        """Frames of the longest cut bucket ``idx`` (not the last) can hold, plus one
        frame of slack (rates differ when nothing is resampled)."""
        rate = self.lengths.counter.rate(int(example.sampling_rate))
        return self.lengths.counter.frames(int(self.bins[idx] * rate) + 1, rate) + 1

    def _bucket_bound(self, example: Cut) -> int:
        if self.bins is None:
            return 0
        idx = self._bucket_index(self.bins, example)
        if idx >= len(self.bins):
            return self._shared.get("last_max", 0)
        return self._edge_frames(idx, example)

    def add(self, example: Cut) -> None:
        frames = self.lengths.frames(example)
        if self.num_cuts == 0:
            self.bound = self._bucket_bound(example)
        self.num_cuts += 1
        self.longest = max(self.longest, frames)
        self.bound = max(self.bound, self.longest)

    def reset(self) -> None:
        self.num_cuts = 0
        self.longest = 0
        self.bound = 0

    def _over_max_cuts(self, n: int) -> bool:
        return self.max_cuts is not None and n > self.max_cuts

    def copy(self) -> _WenetConstraint:
        return copy.copy(self)


@dataclass
class StaticBatchConstraint(_WenetConstraint):
    """Exactly ``batch_size`` utterances per batch (WeNet's ``batch_type: static``)."""

    batch_size: int = 16

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")

    def exceeded(self) -> bool:
        return self.num_cuts > self.batch_size or self._over_max_cuts(self.num_cuts)

    def close_to_exceeding(self) -> bool:
        return (self.num_cuts >= self.batch_size
                or self._over_max_cuts(self.num_cuts + 1))


@dataclass
class MaxFramesConstraint(_WenetConstraint):
    """``utterances x longest utterance (frames) <= max_frames`` (WeNet's
    ``batch_type: dynamic``, ``max_frames_in_batch``); a single longer utterance still
    forms a batch of its own, as in WeNet."""

    max_frames: int = 12000

    def __post_init__(self) -> None:
        if self.max_frames < 1:
            raise ValueError(f"max_frames_in_batch must be >= 1, got {self.max_frames}")

    def exceeded(self) -> bool:
        return (self.num_cuts * self.longest > self.max_frames
                or self._over_max_cuts(self.num_cuts))

    def close_to_exceeding(self) -> bool:
        return ((self.num_cuts + 1) * self.bound > self.max_frames
                or self._over_max_cuts(self.num_cuts + 1))


@dataclass
class BucketBatchConstraint(_WenetConstraint):
    """WeNet's ``batch_type: bucket``: an utterance of ``L`` frames belongs to the first
    bucket whose boundary is ``> L`` (the last bucket is open); a batch holds at most the
    batch size of the bucket of its longest utterance. Sampling buckets are these buckets
    (``duration_bins`` must have ``len(boundaries)`` edges; their values are not used)."""

    boundaries: List[int] = field(default_factory=list)  # frames
    batch_sizes: List[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.boundaries or len(self.batch_sizes) != len(self.boundaries) + 1:
            raise ValueError("bucket batching needs bucket_boundaries and "
                             "len(bucket_batch_sizes) == len(bucket_boundaries) + 1")
        if list(self.boundaries) != sorted(self.boundaries):
            raise ValueError(f"bucket_boundaries must be ascending, got {self.boundaries}")
        if min(self.batch_sizes) < 1:
            raise ValueError(f"bucket_batch_sizes must be >= 1, got {self.batch_sizes}")

    def wenet_bucket(self, frames: int) -> int:
        """WeNet's ``_element_to_bucket_id``: first ``i`` with ``frames < boundaries[i]``."""
        return bisect_right(self.boundaries, frames)

    def _bucket_index(self, buckets: Any, example: Cut) -> int:
        if len(buckets) != len(self.boundaries):
            raise ValueError(f"bucket batching samples from its {len(self.boundaries) + 1} "
                             f"buckets; got {len(buckets) + 1} duration bins")
        return self.wenet_bucket(self.lengths.frames(example))

    def _edge_frames(self, idx: int, example: Cut) -> int:
        return self.boundaries[idx] - 1  # frames < boundary

    def _limit(self, lo_frames: int, hi_frames: int) -> int:
        lo, hi = self.wenet_bucket(lo_frames), self.wenet_bucket(hi_frames)
        return min(self.batch_sizes[lo:hi + 1])

    def exceeded(self) -> bool:
        if self.num_cuts == 0:
            return False
        return (self.num_cuts > self._limit(self.longest, self.longest)
                or self._over_max_cuts(self.num_cuts))

    def close_to_exceeding(self) -> bool:
        if self.num_cuts == 0:
            return False
        return (self.num_cuts + 1 > self._limit(self.longest, self.bound)
                or self._over_max_cuts(self.num_cuts + 1))


# ---------------------------------------------------------------------------- factory


def cut_lengths_from_wenet_conf(dataset_conf: Mapping[str, Any], *, train: bool, seed: int
                                ) -> CutLengths:
    """Lengths as :func:`~wenet_lhotse.loader.build.make_wenet_dataset`'s pipeline makes
    them: WeNet's speeds (0.9, 1.0, 1.1) when ``speed_perturb`` is on in training."""
    from wenet_lhotse.features.pipeline import WENET_SPEEDS

    speeds = WENET_SPEEDS if train and dataset_conf.get("speed_perturb", False) else None
    return CutLengths(FrameCounter.from_wenet_conf(dataset_conf), speeds, int(seed))


def wenet_constraint(batch_conf: Optional[Mapping[str, Any]], lengths: CutLengths,
                     max_cuts: Optional[int] = None) -> _WenetConstraint:
    """The constraint for WeNet's ``batch_conf`` (``static`` with ``batch_size`` 16 when
    absent, WeNet's defaults otherwise). Errors name the ``batch_conf`` key."""
    bc = dict(batch_conf or {})
    btype = bc.get("batch_type", "static")
    if btype == "static":
        return StaticBatchConstraint(lengths, max_cuts, batch_size=int(bc.get("batch_size", 16)))
    if btype == "dynamic":
        return MaxFramesConstraint(lengths, max_cuts,
                                   max_frames=int(bc.get("max_frames_in_batch", 12000)))
    if btype == "bucket":
        return BucketBatchConstraint(lengths, max_cuts,
                                     boundaries=[int(b) for b in bc.get("bucket_boundaries")
                                                 or []],
                                     batch_sizes=[int(s) for s in bc.get("bucket_batch_sizes")
                                                  or []])
    raise ValueError(f"dataset_conf.batch_conf.batch_type: unknown value {btype!r}; "
                     f"use static, dynamic or bucket")


def batch_constraint(batching: Any, dataset_conf: Mapping[str, Any], *, split: str, seed: int,
                     max_duration: Optional[float] = None,
                     quadratic_duration: Optional[float] = None,
                     lengths: Optional[CutLengths] = None) -> SamplingConstraint:
    """The constraint for a resolved :class:`~wenet_lhotse.loader.config.BatchingConfig`:
    WeNet's numbers (``by == "wenet"``, lengths as the ``split``'s feature pipeline makes
    them; ``lengths`` when given is that object, e.g. to share its cache) or Lhotse's
    ``TimeConstraint`` with the ``max_duration`` budget (seconds)."""
    if batching.by == "wenet":
        if lengths is None:
            lengths = cut_lengths_from_wenet_conf(dataset_conf, train=split == "train",
                                                  seed=seed)
        return wenet_constraint(batching.batch_conf, lengths, batching.max_cuts)
    from lhotse.dataset.sampling.base import TimeConstraint

    return TimeConstraint(max_duration=max_duration, max_cuts=batching.max_cuts,
                          quadratic_duration=quadratic_duration)
