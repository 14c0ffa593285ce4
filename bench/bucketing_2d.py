"""Target padding of 2D (duration x tokens) buckets vs 1D duration buckets.

Corpus: metadata-only cuts (no audio is needed to batch) with the corpus generator's
realistic, AISHELL-like durations and token counts that vary independently of the
duration within a factor of 6 (``tokens = round(rate * duration)``, ``rate`` uniform in
1.5-9 tokens/s: read speech, spontaneous speech and a text-heavy task mixed). Both
batchings use Lhotse 1.33's ``DynamicBucketingSampler`` (shuffled, seed 0) with fixed
per-bucket batch sizes from the same budget (``max_duration`` seconds of padded audio):
1D -- Lhotse's ``FixedBucketBatchSizeConstraint`` over ``--buckets`` duration bins
(``estimate_duration_buckets``); 2D -- ``Bucket2DConstraint`` over ``--buckets`` x
``--token-buckets`` bins (``estimate_bins_2d``), sizes by ``bucket_batch_sizes``.
Printed: target padding (share of ``B x longest`` tokens that is padding), audio
padding, batches, and the ratio 2D / 1D.

Run: ``python bench/bucketing_2d.py [--num-cuts 20000] [--buckets 10]
[--token-buckets 4] [--max-duration 200]`` (seconds on one core).
"""

from __future__ import annotations

import argparse
import random
import warnings

from lhotse import CutSet, MonoCut
from lhotse.dataset.sampling.dynamic_bucketing import (
    DynamicBucketingSampler,
    FixedBucketBatchSizeConstraint,
    estimate_duration_buckets,
)

from wenet_lhotse.loader.bins2d import (
    Bucket2DConstraint,
    bucket_batch_sizes,
    estimate_bins_2d,
    num_tokens,
    padding,
)


def corpus(n: int, seed: int = 0):
    import numpy as np

    from wenet_lhotse.corpus import _sample_duration

    rng, nrng = random.Random(seed), np.random.default_rng(seed)
    durs = [_sample_duration(nrng, "realistic", 1.0, 15.0) for _ in range(n)]
    return [MonoCut(id=f"c{i}", start=0.0, duration=float(d), channel=0,
                    custom={"num_tokens": max(1, round(rng.uniform(1.5, 9.0) * d))})
            for i, d in enumerate(durs)]


def batches(cuts, constraint, bins):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        s = DynamicBucketingSampler(CutSet(cuts), constraint=constraint, duration_bins=bins,
                                    shuffle=True, seed=0, buffer_size=len(cuts))
        return [list(b) for b in s]


def measure(num_cuts: int, buckets: int, token_buckets: int, max_duration: float):
    cuts = corpus(num_cuts)
    edges = estimate_duration_buckets(cuts, buckets)
    full = list(edges) + [max(c.duration for c in cuts)]
    sizes_1d = [max(1, int(max_duration / e)) for e in full]
    one = batches(cuts, FixedBucketBatchSizeConstraint(full, sizes_1d), edges)
    bins = estimate_bins_2d([c.duration for c in cuts], [num_tokens(c) for c in cuts],
                            buckets, token_buckets)
    two = batches(cuts, Bucket2DConstraint(bins, bucket_batch_sizes(bins, max_duration)),
                  bins)
    return {"1d": (*padding(one), len(one)), "2d": (*padding(two), len(two)),
            "bins": len(bins)}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--num-cuts", type=int, default=20000)
    p.add_argument("--buckets", type=int, default=10)
    p.add_argument("--token-buckets", type=int, default=4)
    p.add_argument("--max-duration", type=float, default=200.0)
    a = p.parse_args()
    r = measure(a.num_cuts, a.buckets, a.token_buckets, a.max_duration)
    for k in ("1d", "2d"):
        tp, ap, nb = r[k]
        print(f"{k}: target padding {tp:.3f}, audio padding {ap:.3f}, {nb} batches")
    print(f"2D bins: {r['bins']}; target padding 2D / 1D = {r['2d'][0] / r['1d'][0]:.2f}")


if __name__ == "__main__":
    main()
