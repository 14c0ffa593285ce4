"""Lhotse's bucketing with merged bucket remainders: WeNet's batch counts."""

from __future__ import annotations

import math
import random
import warnings

import pytest
from lhotse import CutSet, Recording
from lhotse.dataset.sampling.dynamic_bucketing import DynamicBucketingSampler

from wenet_lhotse.features.recipe import CutLengths, FrameCounter
from wenet_lhotse.loader.bucketing import BucketingSampler, chunk_sorted
from wenet_lhotse.loader.constraints import (
    BucketBatchConstraint,
    MaxFramesConstraint,
    StaticBatchConstraint,
)

BINS = [0.8, 1.3, 1.8, 2.3, 2.8, 3.3, 3.8, 4.3, 5.0]  # 10 buckets (seconds)


def _cuts(n: int, seed: int = 0, lo: float = 0.3, hi: float = 6.0) -> CutSet:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        num = int(rng.uniform(lo, hi) * 16000)
        out.append(Recording(id=f"u{i:04d}", sources=[], sampling_rate=16000, num_samples=num,
                             duration=num / 16000).to_cut())
    return CutSet.from_cuts(out)


def _epoch(cuts, constraint, epoch=0, buffer_size=10000, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        s = BucketingSampler(cuts, constraint=constraint, duration_bins=BINS, shuffle=True,
                             seed=3, buffer_size=buffer_size, **kw)
        s.set_epoch(epoch)
        return [list(b) for b in s]


def _ids(batches):
    return sorted(c.id for b in batches for c in b)


@pytest.mark.parametrize("n,b", [(300, 16), (203, 8), (37, 4), (16, 16), (5, 16)])
@pytest.mark.parametrize("buffer_size", [10000, 40])
def test_static_gives_ceil_n_over_b_full_batches(n, b, buffer_size):
    cuts = _cuts(n, seed=n)
    batches = _epoch(cuts, StaticBatchConstraint(CutLengths(), batch_size=b),
                     buffer_size=buffer_size)
    assert len(batches) == math.ceil(n / b)
    assert all(len(x) == b for x in batches[:-1]) and 0 < len(batches[-1]) <= b
    assert _ids(batches) == sorted(c.id for c in cuts)


def test_static_lhotse_alone_ends_with_a_remainder_per_bucket():
    """What the merge fixes: Lhotse's sampler with the same constraint and buckets."""
    cuts = _cuts(300, seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lhotse_batches = list(DynamicBucketingSampler(
            cuts, constraint=StaticBatchConstraint(CutLengths(), batch_size=16),
            duration_bins=BINS, shuffle=True, seed=3))
    assert len(lhotse_batches) > math.ceil(300 / 16) + 3


def test_static_buckets_keep_padding_low_and_reshuffle():
    cuts = _cuts(600, seed=2)
    c = StaticBatchConstraint(CutLengths(), batch_size=16)
    e0, e1 = _epoch(cuts, c, 0), _epoch(cuts, c, 1)
    assert [[x.id for x in b] for b in e0] != [[x.id for x in b] for b in e1]

    def padding(batches):
        real = sum(x.duration for b in batches for x in b)
        return 1 - real / sum(len(b) * max(x.duration for x in b) for b in batches)

    shuffled = list(cuts)
    random.Random(0).shuffle(shuffled)
    unbucketed = [shuffled[i:i + 16] for i in range(0, 600, 16)]
    assert padding(e0) < 0.5 * padding(unbucketed)


@pytest.mark.parametrize("buffer_size", [10000, 50])
def test_dynamic_cap_holds_with_speed_perturbation_and_every_cut_once(buffer_size):
    lengths = CutLengths(FrameCounter(), speeds=(0.9, 1.0, 1.1), seed=5)
    c = MaxFramesConstraint(lengths, max_frames=2400)
    cuts = _cuts(500, seed=5, hi=9.0)
    for epoch in (0, 1):
        batches = _epoch(cuts, c, epoch, buffer_size=buffer_size)
        lengths.set_epoch(epoch)
        assert max(len(b) * max(lengths.frames(x) for x in b) for b in batches) <= 2400
        assert _ids(batches) == sorted(x.id for x in cuts)


def test_bucket_sizes_hold_in_merged_remainders():
    bounds, sizes = [150, 300, 450], [10, 6, 4, 2]
    lengths = CutLengths(FrameCounter(), speeds=(0.9, 1.0, 1.1), seed=6)
    c = BucketBatchConstraint(lengths, boundaries=bounds, batch_sizes=sizes)
    cuts = _cuts(333, seed=6)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        s = BucketingSampler(cuts, constraint=c, duration_bins=[1.5, 3.0, 4.5], shuffle=True,
                             seed=1)
        batches = [list(b) for b in s]
    for b in batches:
        longest = max(lengths.frames(x) for x in b)
        assert len(b) <= sizes[c.wenet_bucket(longest)]
    assert _ids(batches) == sorted(x.id for x in cuts)


def test_chunk_sorted_respects_the_constraint():
    cuts = sorted(_cuts(50, seed=7), key=lambda x: x.duration)
    chunks = chunk_sorted(cuts, MaxFramesConstraint(CutLengths(), max_frames=1500))
    lengths = CutLengths()
    assert [x for ch in chunks for x in ch] == cuts
    for ch in chunks:
        assert len(ch) * max(lengths.frames(x) for x in ch) <= 1500 or len(ch) == 1
    for a, b in zip(chunks, chunks[1:]):  # greedy: the next cut did not fit
        assert (len(a) + 1) * max(lengths.frames(x) for x in a + b[:1]) > 1500
