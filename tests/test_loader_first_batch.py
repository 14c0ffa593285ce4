"""What happens before the first batch: streamed workers start batching after
``INITIAL_FILL`` cuts (then their buffer grows to ``buffer_size``), deterministically;
bucket edges are estimated from the lengths the sampler compares them with (after speed
perturbation)."""

from __future__ import annotations

from lhotse import CutSet
from lhotse.testing.dummies import dummy_cut

from wenet_lhotse.loader.bins import estimate_bins
from wenet_lhotse.loader.bucketing import BucketingSampler
from wenet_lhotse.loader.constraints import CutLengths, StaticBatchConstraint
from wenet_lhotse.loader.streamed import INITIAL_FILL, WarmStartSampler


def _cuts(n: int):
    return [dummy_cut(i, duration=1.0 + (i * 7919 % 1400) / 100.0) for i in range(n)]


class Counted:
    """A cut iterable that counts how many cuts were read."""

    def __init__(self, cuts):
        self.cuts, self.read = cuts, 0

    def __iter__(self):
        for c in self.cuts:
            self.read += 1
            yield c


def _sampler(cls, cuts, buffer_size=2000):
    return cls(CutSet(cuts), constraint=StaticBatchConstraint(batch_size=16),
               duration_bins=estimate_bins(cuts.cuts if isinstance(cuts, Counted) else cuts,
                                           30), buffer_size=buffer_size, shuffle=True, seed=3)


def test_first_batch_after_initial_fill_then_the_buffer_grows():
    cuts = Counted(_cuts(3000))
    sampler = _sampler(WarmStartSampler, cuts)
    it = iter(sampler)
    first = next(it)
    assert len(first) == 16
    # the initial fill and the refill for the batch drawn; Lhotse's sampler reads
    # buffer_size (2,000) first
    assert cuts.read == INITIAL_FILL + 16
    batches = [first] + [next(it) for _ in range(12)]
    assert sampler._bucketer.remaining() >= 2000 - 16  # grown to the full buffer
    while True:  # (not list(it): iter() on a Lhotse sampler starts a new epoch)
        try:
            batches.append(next(it))
        except StopIteration:
            break
    ids = [c.id for b in batches for c in b]
    assert sorted(ids) == sorted(c.id for c in cuts.cuts)
    assert all(len(b) == 16 for b in batches[:-1])


def test_warm_start_is_deterministic_and_uses_every_cut_once():
    cuts = _cuts(1000)
    runs = [[[c.id for c in b] for b in _sampler(WarmStartSampler, cuts)] for _ in range(2)]
    assert runs[0] == runs[1]
    ids = [i for b in runs[0] for i in b]
    assert sorted(ids) == sorted(c.id for c in cuts)
    assert len(runs[0]) == -(-1000 // 16)  # WeNet's step count, as the plain sampler
    plain = [[c.id for c in b] for b in _sampler(BucketingSampler, cuts)]
    assert len(plain) == len(runs[0])


def test_bins_are_estimated_on_perturbed_lengths():
    from lhotse.dataset.sampling.dynamic_bucketing import estimate_duration_buckets

    cuts = _cuts(600)
    lengths = CutLengths(speeds=(0.9, 1.0, 1.1), seed=5)
    got = estimate_bins(cuts, 10, lengths)
    perturbed = [dummy_cut(0, duration=lengths.seconds(c)) for c in cuts]
    assert got == [float(b) for b in estimate_duration_buckets(perturbed, num_buckets=10)]
    assert got != estimate_bins(cuts, 10)
    assert estimate_bins(cuts, 10, CutLengths()) == estimate_bins(cuts, 10)  # no speeds
