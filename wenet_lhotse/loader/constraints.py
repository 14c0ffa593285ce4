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

Lengths are the ones the feature pipeline will produce, after its resampling and speed
perturbation (:class:`~wenet_lhotse.features.recipe.CutLengths`, its own module), so a
cap holds exactly on the features of every batch.

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
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence

from lhotse.cut import Cut
from lhotse.dataset.sampling.base import SamplingConstraint

from wenet_lhotse.dataset.splits import split_rules
from wenet_lhotse.features.recipe import CutLengths, cut_lengths_from_wenet_conf
from wenet_lhotse.loader.config import batch_value, wenet_batch_conf
from wenet_lhotse.loader.schema import WENET_BATCH_CONF

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

    batch_size: int = WENET_BATCH_CONF["batch_size"][0]

    def __post_init__(self) -> None:
        self.batch_size = batch_value("batch_size", self.batch_size)

    def exceeded(self) -> bool:
        return self.num_cuts > self.batch_size or self._over_max_cuts(self.num_cuts)

    def close_to_exceeding(self) -> bool:
        return (self.num_cuts >= self.batch_size
                or self._over_max_cuts(self.num_cuts + 1))

    def close_after(self, n: int) -> bool:
        """Whether adding any ``n`` cuts makes :meth:`close_to_exceeding` true: what
        Lhotse's ``DynamicBucketer._is_ready`` finds by adding a bucket's cuts to a copy
        one by one (their lengths do not matter here, and the answer only grows with the
        count), from the count alone."""
        k = self.num_cuts + n
        return n > 0 and (k >= self.batch_size or self._over_max_cuts(k + 1))


@dataclass
class MaxFramesConstraint(_WenetConstraint):
    """``utterances x longest utterance (frames) <= max_frames`` (WeNet's
    ``batch_type: dynamic``, ``max_frames_in_batch``); a single longer utterance still
    forms a batch of its own, as in WeNet."""

    max_frames: int = WENET_BATCH_CONF["max_frames_in_batch"][0]

    def __post_init__(self) -> None:
        self.max_frames = batch_value("max_frames_in_batch", self.max_frames)

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
        self.batch_sizes = [batch_value("bucket_batch_sizes", b) for b in self.batch_sizes]

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


def wenet_constraint(batch_conf: Optional[Mapping[str, Any]], lengths: CutLengths,
                     max_cuts: Optional[int] = None) -> _WenetConstraint:
    """The constraint for WeNet's ``batch_conf`` (``static`` with ``batch_size`` 16 when
    absent, WeNet's defaults otherwise). Errors name the ``batch_conf`` key."""
    bc = wenet_batch_conf(batch_conf)  # WeNet's defaults, checked (errors name the key)
    btype = bc["batch_type"]
    if btype == "static":
        return StaticBatchConstraint(lengths, max_cuts, batch_size=bc["batch_size"])
    if btype == "dynamic":
        return MaxFramesConstraint(lengths, max_cuts, max_frames=bc["max_frames_in_batch"])
    return BucketBatchConstraint(lengths, max_cuts, boundaries=bc["bucket_boundaries"],
                                 batch_sizes=bc["bucket_batch_sizes"])


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
            lengths = cut_lengths_from_wenet_conf(dataset_conf, train=split_rules(split).augment,
                                                  seed=seed)
        return wenet_constraint(batching.batch_conf, lengths, batching.max_cuts)
    from lhotse.dataset.sampling.base import TimeConstraint

    return TimeConstraint(max_duration=max_duration, max_cuts=batching.max_cuts,
                          quadratic_duration=quadratic_duration)
