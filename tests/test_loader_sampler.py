"""loader.sampler: epochs, determinism, equivalence with Lhotse's DynamicBucketingSampler."""

from __future__ import annotations

import pytest
from lhotse import CutSet
from lhotse.dataset.sampling.dynamic_bucketing import DynamicBucketingSampler
from loader_common import CONF, Keys, _epoch

from wenet_lhotse.loader.bucketing import BucketingSampler
from wenet_lhotse.loader.build import build_dataloader, estimate_bins
from wenet_lhotse.loader.mux import PositionedStream, ResumableMux
from wenet_lhotse.loader.readers import JsonlReader
from wenet_lhotse.loader.sampler import ResumableBucketingSampler


@pytest.mark.parametrize("kind", ["manifest", "raw", "shar"])
def test_epochs_cover_all_once_and_reshuffle(data, kind):
    _, loader = build_dataloader(str(data[kind]), None, CONF, "train", dataset=Keys(), seed=3)
    e0, e1 = _epoch(loader), _epoch(loader)  # no set_epoch between: WeNet never calls it
    ids = sorted(c.id for c in data["cuts"])
    for e in (e0, e1):
        assert sorted(k for b in e for k in b) == ids
    assert e0 != e1
    assert loader.bucketing_sampler.epoch == 1


def test_same_seed_same_batches_other_seed_differs(data):
    def run(seed):
        _, loader = build_dataloader(str(data["manifest"]), None, CONF, "train",
                                     dataset=Keys(), seed=seed)
        return _epoch(loader) + _epoch(loader)

    assert run(5) == run(5)
    assert run(5) != run(6)


def test_sampler_follows_lhotse_dynamic_bucketing(data):
    """Our resumable sampler draws Lhotse's own batches (bucket choice, shuffling,
    batching) until no bucket holds a full batch; from there bucket remainders are merged,
    exactly as BucketingSampler (Lhotse's sampler over our bucketer) does."""
    bins = estimate_bins(list(data["cuts"]), 3)
    kw = dict(max_duration=12.0, shuffle=True, buffer_size=12, seed=11, world_size=1, rank=0)
    ours = ResumableBucketingSampler(
        ResumableMux([PositionedStream(JsonlReader([str(data["manifest"])]))], seed=11),
        duration_bins=bins, **kw)
    theirs = DynamicBucketingSampler(CutSet.from_jsonl_lazy(data["manifest"]),
                                     duration_bins=bins, **kw)
    stepped = BucketingSampler(CutSet.from_jsonl_lazy(data["manifest"]), duration_bins=bins,
                               **kw)
    for epoch in range(2):
        theirs.set_epoch(epoch)
        stepped.set_epoch(epoch)
        a = [[c.id for c in b] for b in ours]
        b = [[c.id for c in b] for b in theirs]
        assert a == [[c.id for c in b] for b in stepped]
        assert a[:3] == b[:3]
        assert len(a) <= len(b)  # never more partial batches
