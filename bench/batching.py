"""Batching and resume figures for docs/performance.md.

1. Padding: WeNet's static batching (shuffle buffer 1500, sort buffer 500, batch 16,
   emulated exactly: processor.shuffle -> processor.sort -> static batch, feature
   frames with snip_edges) vs our duration bucketing (Lhotse DynamicBucketingSampler),
   with ``max_duration`` tuned so the mean padded frames per batch are the same.
   Metadata only: durations from the corpus generator's realistic (AISHELL-like)
   distribution.
2. Restore at 90% of an epoch, in a fresh loader, timed from building the loader to
   holding the next batch: ours (snapshot of the bucket buffer) vs Lhotse 1.33's
   ``load_state_dict`` (replays the epoch), for a cuts manifest and for a Shar
   directory with real FLAC audio. Both get the same ``duration_bins`` (no estimate),
   the same 120 s budget and the default 20,000-cut buffer; each checks that the
   restored sampler continues with exactly the batch that followed; best of 3.

Run: ``python bench/batching.py [--num-cuts 20000] [--restore-cuts 100000] [--shar-cuts 2000]``
(about 4 minutes on 2 cores, most of it generating and encoding the Shar audio).
"""

from __future__ import annotations

import argparse
import copy
import logging
import random
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
from lhotse import CutSet, Recording
from lhotse.audio import AudioSource
from lhotse.dataset.sampling.dynamic_bucketing import DynamicBucketingSampler

from wenet_lhotse.corpus import _sample_duration, generate_corpus
from wenet_lhotse.formats import read_raw_list
from wenet_lhotse.loader.build import build_dataloader, estimate_bins

SR = 16000
REPEATS = 3  # restore timings: best of 3 fresh restores each (the machine is shared)
warnings.filterwarnings("ignore")
logging.disable(logging.WARNING)


def frames(num_samples: int) -> int:
    """WeNet fbank frames (25 ms window, 10 ms shift, snip_edges=True)."""
    return 1 + (num_samples - 400) // 160 if num_samples >= 400 else 0


def metadata_cuts(n: int, seed: int = 0) -> CutSet:
    rng = np.random.default_rng(seed)
    cuts = []
    for i in range(n):
        dur = _sample_duration(rng, "realistic", 1.0, 20.0)
        ns = int(round(dur * SR))
        rec = Recording(id=f"u{i:07d}", sources=[AudioSource("file", [0], f"/absent/u{i}.wav")],
                        sampling_rate=SR, num_samples=ns, duration=ns / SR)
        cuts.append(rec.to_cut())
    return CutSet.from_cuts(cuts)


def wenet_static_batches(lengths, seed=0, shuffle_size=1500, sort_size=500, batch_size=16):
    """WeNet processor.shuffle -> processor.sort -> static batch, on frame counts."""
    rng = random.Random(seed)
    shuffled, buf = [], []
    for x in lengths:
        buf.append(x)
        if len(buf) >= shuffle_size:
            rng.shuffle(buf)
            shuffled += buf
            buf = []
    rng.shuffle(buf)
    shuffled += buf
    ordered, buf = [], []
    for x in shuffled:
        buf.append(x)
        if len(buf) >= sort_size:
            ordered += sorted(buf)
            buf = []
    ordered += sorted(buf)
    return [ordered[i:i + batch_size] for i in range(0, len(ordered), batch_size)]


def padding_stats(batches):
    real = sum(sum(b) for b in batches)
    padded = sum(len(b) * max(b) for b in batches)
    return 1 - real / padded, padded / len(batches), len(batches)


def bucket_batches(cuts, max_duration, num_buckets, seed=0):
    bins = estimate_bins(list(cuts), num_buckets)
    sampler = DynamicBucketingSampler(cuts, max_duration=max_duration, duration_bins=bins,
                                      shuffle=True, seed=seed, buffer_size=20000)
    return [[frames(c.num_samples) for c in b] for b in sampler]


def padding_section(n: int) -> None:
    cuts = metadata_cuts(n)
    lengths = [frames(c.num_samples) for c in cuts]
    wenet = padding_stats(wenet_static_batches(lengths))
    print(f"corpus: {n} cuts, {sum(c.duration for c in cuts) / 3600:.1f} h, "
          f"mean {np.mean([c.duration for c in cuts]):.2f} s")
    print(f"WeNet static (shuffle 1500, sort 500, batch 16): padding {100 * wenet[0]:.2f} %, "
          f"{wenet[2]} batches/epoch, mean padded frames/batch {wenet[1]:.0f}")
    target = wenet[1]
    for num_buckets in (10, 30):
        lo, hi = 10.0, 400.0  # seconds; bisect to the same mean padded frames per batch
        for _ in range(14):
            mid = (lo + hi) / 2
            stats = padding_stats(bucket_batches(cuts, mid, num_buckets))
            lo, hi = (mid, hi) if stats[1] < target else (lo, mid)
        stats = padding_stats(bucket_batches(cuts, (lo + hi) / 2, num_buckets))
        print(f"ours, bucketing ({num_buckets} buckets, max_duration {(lo + hi) / 2:.1f} s): "
              f"padding {100 * stats[0]:.2f} %, {stats[2]} batches/epoch, "
              f"mean padded frames/batch {stats[1]:.0f}")


class Ids:
    def __getitem__(self, cuts):
        return [c.id for c in cuts]


CONF = {"batch_conf": {"batch_type": "dynamic", "max_frames_in_batch": 12000},
        "lhotse_conf": {"num_buckets": 30}}


def restore_ours(source, bins, consumed_fraction=0.9):
    conf = {**CONF, "lhotse_conf": {**CONF["lhotse_conf"], "duration_bins": bins}}
    _, loader = build_dataloader(source, None, conf, "train", dataset=Ids(), seed=1)
    total = sum(1 for _ in loader)
    _, loader = build_dataloader(source, None, conf, "train", dataset=Ids(), seed=1)
    it = iter(loader)
    k = int(total * consumed_fraction)
    for _ in range(k):
        next(it)
    sd = loader.state_dict()
    expected = next(it)
    times = []
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        _, fresh = build_dataloader(source, None, conf, "train", dataset=Ids(), seed=1)
        fresh.load_state_dict(sd)
        got = next(iter(fresh))
        times.append(time.perf_counter() - t0)
        assert got == expected, "restored loader did not continue with the next batch"
    return min(times), k, total


def restore_lhotse(make_cuts, bins, consumed_fraction=0.9):
    kw = dict(max_duration=120.0, duration_bins=bins, shuffle=True, seed=1, buffer_size=20000)
    sampler = DynamicBucketingSampler(make_cuts(), **kw)
    total = sum(1 for _ in sampler)
    sampler = DynamicBucketingSampler(make_cuts(), **kw)
    it = iter(sampler)
    k = int(total * consumed_fraction)
    for _ in range(k):
        next(it)
    sd = sampler.state_dict()
    expected = [c.id for c in next(it)]
    times = []
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        fresh = DynamicBucketingSampler(make_cuts(), **kw)
        fresh.load_state_dict(copy.deepcopy(sd))  # Lhotse consumes its argument
        got = [c.id for c in next(iter(fresh))]
        times.append(time.perf_counter() - t0)
        assert got == expected
    return min(times), k, total


def restore_section(n: int, shar_cuts: int, workdir: Path) -> None:
    manifest = workdir / "cuts.jsonl.gz"
    metadata_cuts(n, seed=1).to_file(manifest)
    bins = estimate_bins(list(CutSet.from_file(manifest).subset(first=5000)), 30)
    ours, k, total = restore_ours(str(manifest), bins)
    theirs, k2, total2 = restore_lhotse(lambda: CutSet.from_jsonl_lazy(manifest), bins)
    print(f"restore at 90% (batch {k}/{total}), cuts manifest of {n} cuts: ours {ours:.3f} s, "
          f"Lhotse replay {theirs:.3f} s (batch {k2}/{total2}) -> {theirs / ours:.1f}x faster")

    corpus = generate_corpus(workdir / "corpus", num_utterances=shar_cuts, min_duration=1.0,
                             max_duration=15.0, duration_dist="realistic", seed=5)
    cuts = CutSet.from_cuts(list(read_raw_list(corpus.data_list)))
    shar = workdir / "shar"
    shar.mkdir()
    cuts.to_shar(shar, fields={"recording": "flac"}, shard_size=200)
    bins = estimate_bins(list(cuts), 30)
    ours, k, total = restore_ours(str(shar), bins)
    theirs, k2, total2 = restore_lhotse(lambda: CutSet.from_shar(in_dir=shar), bins)
    size = sum(p.stat().st_size for p in shar.glob("recording.*.tar")) / 2**20
    print(f"restore at 90% (batch {k}/{total}), Shar of {shar_cuts} cuts "
          f"({corpus.total_duration / 3600:.2f} h, {size:.0f} MiB FLAC): ours {ours:.3f} s, "
          f"Lhotse replay {theirs:.3f} s (batch {k2}/{total2}) -> {theirs / ours:.1f}x faster")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--num-cuts", type=int, default=20000)
    ap.add_argument("--restore-cuts", type=int, default=100000)
    ap.add_argument("--shar-cuts", type=int, default=2000)
    args = ap.parse_args()
    print("## padding and batches per epoch")
    padding_section(args.num_cuts)
    print("## restore cost")
    with tempfile.TemporaryDirectory() as d:
        restore_section(args.restore_cuts, args.shar_cuts, Path(d))


if __name__ == "__main__":
    main()
