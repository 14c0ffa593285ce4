"""The private Lhotse internals our samplers (``wenet_lhotse.loader.sampler``,
``wenet_lhotse.loader.bucketing``, ``wenet_lhotse.loader.constraints``) subclass and call.
``pyproject.toml`` pins ``lhotse>=1.33,<1.34``; this test fails loudly, naming the
internal, when a Lhotse upgrade changes any of them -- then re-check those modules against
the new Lhotse before widening the pin."""

from __future__ import annotations

import inspect
import queue
import random
import re
from pathlib import Path

import lhotse
import pytest
from lhotse import CutSet
from lhotse.dataset.dataloading import resolve_seed
from lhotse.dataset.sampling import dynamic_bucketing as db
from lhotse.dataset.sampling.base import (
    CutSampler,
    SamplingConstraint,
    SamplingDiagnostics,
    attach_dataloading_info,
)
from lhotse.dataset.sampling.dynamic import DurationBatcher, Filter

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def _params(fn) -> set:
    return set(inspect.signature(fn).parameters)


def test_installed_lhotse_is_the_pinned_minor_version():
    pin = re.search(r'"lhotse>=([\d.]+),<([\d.]+)"', PYPROJECT.read_text()).groups()
    version = tuple(int(x) for x in lhotse.__version__.split(".")[:2])
    low = tuple(int(x) for x in pin[0].split(".")[:2])
    high = tuple(int(x) for x in pin[1].split(".")[:2])
    assert low <= version < high, f"lhotse {lhotse.__version__} outside the pin {pin}"


@pytest.mark.parametrize("fn,needed", [
    (db.DynamicBucketer.__init__, {"cuts", "duration_bins", "world_size", "max_duration",
                                   "max_cuts", "constraint", "drop_last", "buffer_size",
                                   "quadratic_duration", "shuffle", "rng", "bucket_rng",
                                   "diagnostics"}),
    (db.DynamicBucketer._select_bucket, {"self", "state"}),
    (db.DynamicBucketer._collect_cuts_in_buckets, {"self", "n_cuts"}),
    (db.DynamicBucketer._is_ready, {"self", "bucket"}),
    (Filter.__init__, {"iterator", "predicate", "diagnostics"}),
    (attach_dataloading_info, {"cuts", "rank", "world_size"}),
    (SamplingConstraint.select_bucket, {"self", "buckets", "example", "example_len"}),
    (db.pick_at_random, {"bucket", "rng", "out_indexes_used"}),
    (DurationBatcher.__init__, {"datapipe", "constraint", "diagnostics"}),
    (db.BucketSelectionState.__init__, {"bucket_rng", "num_buckets", "world_size"}),
    (db.DynamicBucketingSampler.__init__, {"max_duration", "max_cuts", "constraint",
                                           "shuffle", "drop_last",
                                           "duration_bins", "buffer_size",
                                           "quadratic_duration", "world_size", "rank", "seed",
                                           "sync_buckets"}),
    (resolve_seed, {"seed"}),
], ids=lambda x: getattr(x, "__qualname__", ""))
def test_signatures_we_call(fn, needed):
    missing = needed - _params(fn)
    assert not missing, f"{fn.__qualname__} lost parameters {sorted(missing)}"


def test_cut_sampler_next_asks_next_batch_world_size_times():
    """Our sampler overrides ``_next_batch``; Lhotse's ``CutSampler.__next__`` must keep
    calling it (once per rank) for rank-aware batching."""
    src = inspect.getsource(CutSampler.__next__)
    assert "self._next_batch()" in src and "self.world_size" in src


def test_sampling_constraint_interface():
    """``loader.constraints`` implements exactly these abstract methods; samplers call
    ``copy``/``reset``/``add``/``exceeded``/``close_to_exceeding``/``select_bucket``."""
    assert SamplingConstraint.__abstractmethods__ == {
        "add", "exceeded", "close_to_exceeding", "reset", "measure_length"}
    for name in ("copy", "select_bucket"):
        assert callable(getattr(SamplingConstraint, name))
    src = inspect.getsource(DurationBatcher._collect_batch)
    # Lhotse adds the cut, then stops when close_to_exceeding(): the reason our frame
    # constraints bound the next cut by the bucket's longest possible one.
    assert "self.constraint.add(" in src and "close_to_exceeding()" in src


def test_bucket_selection_state_checkpoint_keys():
    """The sampler stores ``BucketSelectionState.save()`` in checkpoints and converts the
    ``_bucket_rng`` entry back to tuples on restore."""
    state = db.BucketSelectionState(bucket_rng=random.Random(1), num_buckets=3, world_size=2)
    state.select_bucket_idx()
    saved = state.save()
    assert set(saved) == {"_bucket_rng", "_bucket_idx", "_usage_count"}
    state.restore(saved)


def test_bucketer_attributes_we_use(corpus_cuts):
    """A real bucketer and sampler expose what ``sampler.py`` reads and writes."""
    cuts = CutSet.from_cuts(list(corpus_cuts)[:8])
    bins = [2.0, 3.0]
    bucketer = db.DynamicBucketer(cuts, duration_bins=bins, world_size=1, max_duration=10.0,
                                  shuffle=True, rng=random.Random(0),
                                  bucket_rng=random.Random(1),
                                  diagnostics=SamplingDiagnostics())
    for name in ("buckets", "constraint", "duration_bins", "rng", "shuffle", "diagnostics",
                 "drop_last"):
        assert hasattr(bucketer, name), f"DynamicBucketer.{name} is gone"
    assert len(bucketer.buckets) == len(bins) + 1
    bucket = bucketer.buckets[0]
    assert isinstance(bucket, queue.Queue)
    with bucket.mutex:  # we edit bucket.queue in place under its mutex
        assert isinstance(bucket.queue, type(queue.Queue().queue))
    assert callable(bucketer.constraint.select_bucket) and callable(bucketer.constraint.copy)
    bucketer.cuts_iter = iter(cuts)  # what our _collect_cuts_in_buckets reads
    bucketer._collect_cuts_in_buckets(8)
    state = db.BucketSelectionState(bucket_rng=random.Random(1), num_buckets=len(bins) + 1,
                                    world_size=1)
    assert isinstance(bucketer._select_bucket(state), queue.Queue)

    sampler = db.DynamicBucketingSampler(cuts, max_duration=10.0, duration_bins=bins, seed=0)
    for name in ("sync_buckets", "duration_bins", "world_size", "max_duration", "max_cuts",
                 "constraint", "drop_last", "buffer_size", "quadratic_duration", "shuffle",
                 "seed", "epoch", "diagnostics", "_just_restored_state", "_filter_fn",
                 "_transforms"):
        assert hasattr(sampler, name), f"DynamicBucketingSampler.{name} is gone"
    assert callable(sampler._log_diagnostics) and callable(sampler.allow_iter_to_reset_state)
    assert callable(sampler.diagnostics.reset_current_epoch)
    assert callable(sampler.diagnostics.set_epoch)
