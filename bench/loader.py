"""End-to-end training-loader throughput: ours vs the plain-Lhotse loader a user could write.

Same generated corpus (realistic AISHELL-like durations), same cores, same duration
budget (120 s of padded audio per batch), one epoch each, each loader in its own
fresh process (clean CPU and memory accounting):

* ours: ``build_dataloader`` with a WeNet aishell-like ``dataset_conf`` (fbank 80 bins,
  dither 0.1, spec_aug 2x50 frames / 2x10 bins; no speed perturbation, which plain
  Lhotse would not do either), our bucketing and ``WenetAsrDataset`` + ``PooledFeatures``;
* plain Lhotse: ``DynamicBucketingSampler`` (30 buckets) + ``K2SpeechRecognitionDataset(
  input_strategy=OnTheFlyFeatures(Fbank(80 bins, dither 0.1)), input_transforms=
  [SpecAugment(no time warp, 2x50 frames, 2x10 bins)])``.

Printed per loader: audio seconds per wall second, time to first batch (from building
the loader), CPU seconds per audio hour (main process + DataLoader workers + pool
workers), peak RSS (main process; largest child).

Run: ``python bench/loader.py [--num-utts 400] [--workers 2]``.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

warnings.filterwarnings("ignore")

CONF = {
    "fbank_conf": {"num_mel_bins": 80, "frame_shift": 10, "frame_length": 25, "dither": 0.1},
    "spec_aug": True,
    "spec_aug_conf": {"num_t_mask": 2, "num_f_mask": 2, "max_t": 50, "max_f": 10},
    "filter_conf": {"max_length": 40960, "min_length": 0},
    "shuffle": True,
    "batch_conf": {"batch_type": "dynamic", "max_frames_in_batch": 12000},
}


def run_ours(root: Path, workers: int, pool: int):
    from wenet_lhotse.loader.build import build_dataloader
    from wenet_lhotse.text import CharTokenizer

    conf = {**CONF, "lhotse_conf": {"num_buckets": 30, "pool_workers": pool}}
    t0 = time.perf_counter()
    _, loader = build_dataloader(str(root / "cuts.jsonl.gz"), CharTokenizer(root / "units.txt"),
                                 conf, "train", num_workers=workers, seed=1,
                                 persistent_workers=False)
    return t0, loader, lambda b: float(b["feats_lengths"].sum()) / 100.0


def run_lhotse(root: Path, workers: int, pool: int):
    import torch
    from lhotse import CutSet, Fbank, FbankConfig
    from lhotse.dataset import (
        DynamicBucketingSampler,
        K2SpeechRecognitionDataset,
        OnTheFlyFeatures,
        SpecAugment,
    )

    t0 = time.perf_counter()
    cuts = CutSet.from_jsonl_lazy(root / "cuts.jsonl.gz")
    sampler = DynamicBucketingSampler(cuts, max_duration=120.0, num_buckets=30, shuffle=True,
                                      seed=1)
    dataset = K2SpeechRecognitionDataset(
        input_strategy=OnTheFlyFeatures(Fbank(FbankConfig(num_mel_bins=80, dither=0.1))),
        input_transforms=[SpecAugment(time_warp_factor=0, num_frame_masks=2,
                                      frames_mask_size=50, num_feature_masks=2,
                                      features_mask_size=10)])
    loader = torch.utils.data.DataLoader(dataset, sampler=sampler, batch_size=None,
                                         num_workers=workers)
    return t0, loader, lambda b: float(b["supervisions"]["num_frames"].sum()) / 100.0


def child(which: str, root: Path, workers: int, pool: int) -> None:
    import torch

    torch.set_num_threads(1)
    t0, loader, audio_of = (run_ours if which == "ours" else run_lhotse)(root, workers, pool)
    first = None
    audio = 0.0
    batches = 0
    for batch in loader:
        if first is None:
            first = time.perf_counter() - t0
        audio += audio_of(batch)
        batches += 1
    wall = time.perf_counter() - t0
    del loader
    import gc

    gc.collect()
    time.sleep(0.5)  # let workers and pools exit so their CPU time is accounted
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime
    print(json.dumps({"batches": batches, "audio": audio, "wall": wall, "first": first,
                      "cpu": cpu, "rss_main": me.ru_maxrss / 1024, "rss_child":
                      kids.ru_maxrss / 1024}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--num-utts", type=int, default=400)
    ap.add_argument("--workers", type=int, default=2, help="DataLoader workers (both loaders)")
    ap.add_argument("--pool", type=int, nargs="*", default=[],
                    help="also run ours with these PooledFeatures pool sizes per worker")
    ap.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        which, root, workers, pool = args.child
        child(which, Path(root), int(workers), int(pool))
        return
    from lhotse import CutSet

    from wenet_lhotse.corpus import generate_corpus
    from wenet_lhotse.formats import read_raw_list

    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        corpus = generate_corpus(root / "corpus", num_utterances=args.num_utts,
                                 min_duration=1.0, max_duration=15.0,
                                 duration_dist="realistic", seed=3)
        CutSet.from_cuts(list(read_raw_list(corpus.data_list))).to_file(root / "cuts.jsonl.gz")
        (root / "units.txt").write_bytes(corpus.units.read_bytes())
        print(f"corpus: {args.num_utts} utterances, {corpus.total_duration / 3600:.2f} h; "
              f"{args.workers} DataLoader workers each")
        print("| loader | audio s/s | first batch (s) | CPU s / audio h | peak RSS main / "
              "child (MiB) | batches |")
        print("|---|---|---|---|---|---|")
        runs = [("plain Lhotse", "lhotse", 0), ("ours", "ours", 0)]
        runs += [(f"ours, pool {p}", "ours", p) for p in args.pool]
        results = {}
        for label, which, pool in runs:
            out = subprocess.run([sys.executable, __file__, "--child", which, str(root),
                                  str(args.workers), str(pool)], capture_output=True,
                                 text=True, check=True)
            r = json.loads(out.stdout.strip().splitlines()[-1])
            results[label] = r
            print(f"| {label} | {r['audio'] / r['wall']:.0f} | {r['first']:.2f} | "
                  f"{r['cpu'] / (r['audio'] / 3600):.0f} | {r['rss_main']:.0f} / "
                  f"{r['rss_child']:.0f} | {r['batches']} |")
        def rate(r):
            return r["audio"] / r["wall"]

        base = rate(results["plain Lhotse"])
        for label, r in results.items():
            if label != "plain Lhotse":
                print(f"{label} vs plain Lhotse: {rate(r) / base:.2f}x throughput")


if __name__ == "__main__":
    main()
