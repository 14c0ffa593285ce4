"""2D (duration x tokens) bins: ours vs NeMo's algorithm, both run through our sampler.

Corpus (issue 31's): ``--num-cuts`` metadata-only Lhotse cuts with one supervision each
(no audio is needed to batch): durations lognormal, median 5 s (sigma 0.6), clipped to
1-20 s; tokens ``round(tps * duration)`` with ``tps`` normal around 4.2 tokens/s (sd 0.7,
at least 1), and 100 fast talkers (per 20,000 cuts) at 3x that rate.

Bins, ``--buckets`` x ``--token-buckets`` from every cut's (duration, tokens):

* ours: :func:`wenet_lhotse.loader.bins2d.estimate_bins_2d` (``wenet-lhotse estimate-bins``);
* NeMo's: :func:`nemo_bins`, written here from NeMo's
  ``scripts/speech_recognition/estimate_duration_bins_2d.py``
  (https://github.com/NVIDIA/NeMo/blob/002ad10f9ff61bda73738fbfec9c040758e81582/scripts/speech_recognition/estimate_duration_bins_2d.py,
  ``estimate_duration_buckets``), step by step, including that its token edges for a
  duration bucket are estimated from the cuts from that bucket's start to the end of the
  sorted data (``end_idx=binidx``, the loop variable of the duration pass, as written
  there). Not in the package: it is the baseline.

Both are batched by our map-style training sampler
(:class:`~wenet_lhotse.loader.sampler.ResumableBucketingSampler`, shuffled, seed 0, buffer
20,000, one epoch) with :class:`~wenet_lhotse.loader.constraint2d.Bucket2DConstraint`,
per-bin batch sizes from the same budget (``--max-duration`` seconds of padded audio, and
with ``--max-tokens`` padded tokens), caps enforced. Two selections: *lenient*, every cut
trained (the default); *strict + max_tps*, NeMo's default at sampling (``strict_2d`` and its
per-bucket ``max_tps``, outliers filtered; ours with its own ``max_tps`` per bin).
Printed per row: batches, token padding, audio padding (shares of ``B x longest``),
cuts filtered, and the largest batch over its caps (padded seconds / budget, padded
tokens / cap).

Run: ``python bench/bucketing_2d.py [--num-cuts 20000] [--buckets 10] [--token-buckets 4]
[--max-duration 200] [--max-tokens 800] [--equal-duration]`` (20 s of one core).
"""

from __future__ import annotations

import argparse
import math
import warnings
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
from lhotse import AudioSource, MonoCut, Recording, SupervisionSegment

from wenet_lhotse.loader.bins2d import (
    bucket_batch_sizes,
    estimate_bins_2d,
    num_tokens,
    padding,
)
from wenet_lhotse.loader.constraint2d import Bucket2DConstraint, TpsFilter
from wenet_lhotse.loader.mux import PositionedStream, ResumableMux
from wenet_lhotse.loader.sampler import ResumableBucketingSampler
from wenet_lhotse.sources.positioned import ListReader


def corpus(n: int = 20000, seed: int = 0, fast: Optional[int] = None) -> List[MonoCut]:
    """Issue 31's cuts (see the module docstring; ``fast`` talkers, default 100 per 20,000
    cuts); ``custom["num_tokens"]`` and a supervision whose text has that many characters."""
    fast = n // 200 if fast is None else fast
    rng = np.random.default_rng(seed)
    durs = np.clip(rng.lognormal(math.log(5.0), 0.6, n), 1.0, 20.0)
    tps = np.maximum(rng.normal(4.2, 0.7, n), 1.0)
    tps[rng.choice(n, size=min(fast, n), replace=False)] *= 3.0
    cuts = []
    for i, (d, r) in enumerate(zip(durs, tps)):
        k = max(1, int(round(r * d)))
        d = round(float(d), 3)
        rec = Recording(f"r{i}", [AudioSource("file", [0], f"r{i}.wav")], 16000,
                        int(d * 16000), d)  # metadata: no file is read
        cuts.append(MonoCut(id=f"c{i}", start=0.0, duration=d, channel=0, recording=rec,
                            supervisions=[SupervisionSegment(f"c{i}", f"r{i}", 0.0, d,
                                                             text="a" * k)],
                            custom={"num_tokens": k}))
    return cuts


def nemo_bins(durations: Sequence[float], tokens: Sequence[int], num_buckets: int,
              num_subbuckets: int, threshold: float = 4.0
              ) -> Tuple[List[Tuple[float, int]], List[float]]:
    """NeMo's ``estimate_duration_buckets`` (2D) as written at the cited commit:
    ``(bins, tps_thresholds)``."""
    sizes = np.asarray(durations, dtype=np.float32)
    toks = np.asarray(tokens, dtype=np.int32)
    joint = np.rec.fromarrays([sizes, toks])
    joint.sort()
    sizes, toks = joint.f0, joint.f1
    size_per_bucket = sizes.sum() / num_buckets
    max_duration = round(float(sizes[-1]), 3)
    bins: List[Tuple[float, int]] = []
    tps_thresholds: List[float] = []

    def token_buckets(max_bucket_duration: float, start: int, end: int, corr: int) -> None:
        nt_all, sz_all = toks[start:end], sizes[start:end]
        tps = nt_all / sz_all
        keep = np.where((tps - tps.mean()) / tps.std() <= threshold)
        nt, sz = nt_all[keep], sz_all[keep]
        max_tps = float((nt / sz).max())
        j = np.rec.fromarrays([nt, sz])
        j.sort()
        nt = j.f0
        per_sub = nt.sum() / corr
        tot = 0
        for n in nt:
            if tot > per_sub:
                bins.append((float(max_bucket_duration), int(n)))
                tps_thresholds.append(max_tps)
                tot = 0
            tot += n
        bins.append((float(max_bucket_duration), int(n)))
        tps_thresholds.append(max_tps)

    duration_bins: List[float] = []
    bin_indexes = [0]
    tot = 0.0
    binidx = 0
    for binidx, size in enumerate(sizes):
        if tot > size_per_bucket:
            duration_bins.append(round(float(size), 3))
            bin_indexes.append(binidx)
            tot = 0.0
        tot += size
    skipped, start = 1, 0
    for i, (duration_bin, bin_idx) in enumerate(zip(duration_bins, bin_indexes[1:])):
        if (i != len(duration_bins) - 1 and duration_bins[i + 1] == duration_bin) or (
                i == len(duration_bins) - 1 and max_duration == duration_bin):
            skipped += 1
            continue
        token_buckets(duration_bin, start, binidx, num_subbuckets * skipped)  # sic: binidx
        start, skipped = bin_idx, 1
    token_buckets(max_duration, start, binidx, num_subbuckets * skipped)
    return bins, tps_thresholds


def run_sampler(cuts: List[MonoCut], bins: List[Tuple[float, int]], max_duration: float,
                max_tokens: Optional[int], strict: bool = False,
                max_tps: Optional[List[float]] = None, seed: int = 0
                ) -> Tuple[List[List[MonoCut]], int]:
    """One epoch of our sampler over ``cuts`` with these bins: ``(batches, filtered)``."""
    sizes = bucket_batch_sizes(bins, max_duration, max_tokens)
    con = Bucket2DConstraint(bins, sizes, strict=strict, max_duration=max_duration,
                             max_tokens=max_tokens)
    kept, filtered = cuts, 0
    if max_tps is not None:
        tps = TpsFilter(bins, num_tokens, max_tps=max_tps, strict=strict)
        kept = [c for c in cuts if tps.keep(c)]
        filtered = tps.filtered
    mux = ResumableMux([PositionedStream(ListReader(kept, shuffle=True, seed=seed))],
                       seed=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sampler = ResumableBucketingSampler(mux, duration_bins=list(bins), constraint=con,
                                            shuffle=True, buffer_size=20000, world_size=1,
                                            rank=0, seed=seed)
        return [list(b) for b in sampler], filtered


def over_budget(batches: List[List[MonoCut]], max_duration: float,
                max_tokens: Optional[int]) -> Tuple[float, float]:
    """The largest ``B x longest`` over the duration budget, and over the token cap."""
    dur = max(len(b) * max(c.duration for c in b) for b in batches if len(b) > 1)
    tok = max(len(b) * max(num_tokens(c) for c in b) for b in batches if len(b) > 1)
    return dur / max_duration, (tok / max_tokens if max_tokens else 0.0)


def measure(num_cuts: int = 20000, buckets: int = 10, token_buckets: int = 4,
            max_duration: float = 200.0, max_tokens: Optional[int] = 800,
            seed: int = 0, equal_duration: bool = False
            ) -> Dict[Tuple[str, str, str], Dict[str, float]]:
    """Every row: ``(bins, selection, cap) -> {batches, token_pad, audio_pad, filtered,
    over_d, over_t}``. ``equal_duration``: our duration edges by equal total duration
    (NeMo's rule) instead of the fewest batches for ``max_duration``."""
    cuts = corpus(num_cuts, seed)
    durs, toks = [c.duration for c in cuts], [num_tokens(c) for c in cuts]
    ours = estimate_bins_2d(durs, toks, buckets, token_buckets,
                            max_duration=None if equal_duration else max_duration)
    nemo, nemo_tps = nemo_bins(durs, toks, buckets, token_buckets)
    rows = {}
    for cap in (None, max_tokens):
        for name, bins, tps in (("ours", ours.bins, ours.max_tps), ("nemo", nemo, nemo_tps)):
            for sel, strict, filt in (("lenient", False, None), ("strict+max_tps", True, tps)):
                batches, filtered = run_sampler(cuts, bins, max_duration, cap, strict, filt,
                                                seed)
                tp, ap = padding(batches)
                od, ot = over_budget(batches, max_duration, cap)
                rows[(name, sel, f"{cap} tokens" if cap else "no token cap")] = {
                    "batches": len(batches), "token_pad": tp, "audio_pad": ap,
                    "filtered": filtered, "over_d": od, "over_t": ot, "bins": len(bins)}
    return rows


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--num-cuts", type=int, default=20000)
    p.add_argument("--buckets", type=int, default=10)
    p.add_argument("--token-buckets", type=int, default=4)
    p.add_argument("--max-duration", type=float, default=200.0)
    p.add_argument("--max-tokens", type=int, default=800)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--equal-duration", action="store_true",
                   help="our duration edges by equal total duration (NeMo's rule)")
    a = p.parse_args()
    rows = measure(a.num_cuts, a.buckets, a.token_buckets, a.max_duration, a.max_tokens,
                   a.seed, a.equal_duration)
    print(f"{'cap':<14}{'selection':<16}{'bins':<6}{'n':>4}{'batches':>9}{'tok pad':>9}"
          f"{'aud pad':>9}{'filtered':>9}{'max B*d/cap':>12}{'max B*t/cap':>12}")
    for (name, sel, cap), r in rows.items():
        print(f"{cap:<14}{sel:<16}{name:<6}{r['bins']:>4}{r['batches']:>9}"
              f"{100 * r['token_pad']:>8.1f}%{100 * r['audio_pad']:>8.1f}%{r['filtered']:>9}"
              f"{r['over_d']:>12.3f}{r['over_t']:>12.3f}")
    for key in {(sel, cap) for _, sel, cap in rows}:
        o, n = rows[("ours", *key)], rows[("nemo", *key)]
        print(f"{key[1]}, {key[0]}: ours / NeMo: batches {o['batches'] / n['batches']:.3f}, "
              f"token padding {o['token_pad'] / n['token_pad']:.2f}, "
              f"audio padding {o['audio_pad'] / n['audio_pad']:.2f}")


if __name__ == "__main__":
    main()
