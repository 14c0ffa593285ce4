"""Feature extraction and pooled-loader throughput, measured side by side in one run.

Usage (from the repository root)::

    python bench/features.py                      # full run, ~2-3 min on 2 cores
    python bench/features.py --quick              # smaller corpus and fewer repeats
    WENET_LHOTSE_KALDI_PY=/tmp/ta/kaldi.py python bench/features.py

Part 1 (one thread, ``torch.set_num_threads(1)``): seconds of audio per second of CPU
for ``WenetFbank`` vs torchaudio's ``compliance.kaldi.fbank`` with WeNet's arguments
(real torchaudio, or the standalone ``kaldi.py`` named by ``$WENET_LHOTSE_KALDI_PY`` --
copy it from any torchaudio wheel and delete its ``import torchaudio`` line) vs Lhotse's
``Fbank``; and max abs difference to torchaudio.

Part 2: end-to-end loader throughput on a generated corpus (training settings: speed
perturbation 0.9/1.0/1.1, dither 0.1, spec_aug), batches from Lhotse's
``DynamicBucketingSampler``, for DataLoader workers only, the process pool only, and
both, at 2 busy processes; plus pool 1 vs pool 2.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from typing import Callable, List

import numpy as np
import torch

from wenet_lhotse.corpus import generate_corpus, synthesize
from wenet_lhotse.features import PooledFeatures, WenetFbank, WenetFbankConfig
from wenet_lhotse.features.reference import load_torchaudio_kaldi


def best_of(fn: Callable[[], object], repeats: int) -> float:
    fn()  # warm-up: caches, allocator
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def bench_extractors(repeats: int) -> None:
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    waves = [synthesize("abcd efg hijk lmnop " * 3, 16000, rng) for _ in range(8)]
    seconds = sum(len(w) for w in waves) / 16000
    kaldi, origin = load_torchaudio_kaldi()
    print(f"\n## Extraction, 1 thread: {len(waves)} utterances, {seconds:.1f} s of 16 kHz "
          f"audio, 80 bins\ntorchaudio reference: {origin}\n")
    print("| extractor | dither | audio s / s | vs torchaudio | max abs diff |")
    print("|---|---|---|---|---|")
    tensors = [torch.from_numpy(w).unsqueeze(0) for w in waves]
    for dither in (0.0, 0.1):
        _extractor_rows(dither, waves, tensors, seconds, kaldi, repeats)
    torch.set_num_threads(os.cpu_count() or 1)


def _extractor_rows(dither, waves, tensors, seconds, kaldi, repeats) -> None:
    rows = []
    ours = WenetFbank(WenetFbankConfig(num_mel_bins=80, dither=dither))
    t_ours = best_of(lambda: [ours.extract(w, 16000) for w in tensors], repeats)
    t_batch = best_of(lambda: ours.extract_batch(waves, 16000), repeats)
    t_ta = diff = None
    if kaldi is not None:
        def ta():
            return [kaldi.fbank(w * 32768, num_mel_bins=80, frame_length=25, frame_shift=10,
                                dither=dither, energy_floor=0.0, sample_frequency=16000)
                    for w in tensors]
        t_ta = best_of(ta, repeats)
        if dither == 0.0:
            diff = max(float((a - b).abs().max()) for a, b in
                       zip(ta(), [ours.extract(w, 16000) for w in tensors]))
    rows.append(("torchaudio kaldi.fbank", t_ta, "0" if dither == 0 else None))
    rows.append(("WenetFbank.extract", t_ours, diff))
    rows.append(("WenetFbank.extract_batch", t_batch, None))
    if dither == 0.0:
        from lhotse import Fbank, FbankConfig

        lh = Fbank(FbankConfig(num_filters=80))
        t_lh = best_of(lambda: [lh.extract(w, 16000) for w in waves], repeats)
        rows.append(("lhotse Fbank (its defaults)", t_lh, "n/a (other features)"))
    for name, t, d in rows:
        if t is None:
            print(f"| {name} | {dither} | (not available) | | |")
            continue
        rel = f"{t_ta / t:.2f}x" if t_ta else ""
        dd = d if isinstance(d, str) else ("" if d is None else f"{d:.1e}")
        print(f"| {name} | {dither} | {seconds / t:,.0f} | {rel} | {dd} |")


class _Dataset(torch.utils.data.Dataset):
    def __init__(self, features: PooledFeatures) -> None:
        self.features = features

    def __getitem__(self, cuts):
        feats, lens, kept, _ = self.features(cuts, augment=True)
        return feats.shape[0], sum(c.duration for c in kept)


def load_cuts(data_list: str):
    import json

    from lhotse import CutSet, Recording

    cuts = []
    with open(data_list, encoding="utf-8") as f:
        for line in f:
            item = json.loads(line)
            cuts.append(Recording.from_file(item["wav"], recording_id=item["key"]).to_cut())
    return CutSet.from_cuts(cuts)


def bench_loader(num_utts: int, epochs: int) -> None:
    from lhotse.dataset import DynamicBucketingSampler

    tmp = tempfile.mkdtemp(prefix="wenet_lhotse_bench_")
    paths = generate_corpus(tmp, num_utterances=num_utts, duration_dist="realistic",
                            min_duration=1.0, max_duration=15.0, seed=0)
    cuts = load_cuts(str(paths.data_list))
    total = paths.total_duration
    print(f"\n## Loader throughput: {num_utts} utterances, {total / 60:.1f} min of audio, "
          f"train augmentation (speed perturb, dither 0.1, spec_aug), best of {epochs} "
          f"epochs after a warm-up epoch, {os.cpu_count()} CPUs\n")
    print("| setup | busy processes | audio s / s | vs pool 1 |")
    print("|---|---|---|---|")
    extractor = WenetFbank(WenetFbankConfig(num_mel_bins=80, dither=0.1))

    def run(loader_workers: int, pool: int) -> float:
        features = PooledFeatures(extractor, num_workers=pool, speed_perturb=True,
                                  spec_aug=True, seed=0)
        sampler = DynamicBucketingSampler(cuts, max_duration=120.0, num_buckets=4,
                                          shuffle=False)
        loader = torch.utils.data.DataLoader(
            _Dataset(features), sampler=sampler, batch_size=None,
            num_workers=loader_workers, persistent_workers=loader_workers > 0)
        times: List[float] = []
        try:
            for epoch in range(epochs + 1):
                t0 = time.perf_counter()
                seconds = sum(dur for _, dur in loader)
                if epoch:  # epoch 0 warms up workers, pools and caches
                    times.append(time.perf_counter() - t0)
        finally:
            del loader
            features.close()
        assert abs(seconds - total) < 1.0, (seconds, total)
        return total / min(times)

    setups = [
        ("pool 1, no DataLoader workers", 0, 1, 1),
        ("(a) DataLoader workers 2, pool 0", 2, 0, 2),
        ("(b) pool 2, no DataLoader workers", 0, 2, 2),
        ("(c) DataLoader worker 1 + pool 2", 1, 2, 2),
        ("in-process (workers 0, pool 0)", 0, 0, 1),
    ]
    base = None
    for name, workers, pool, busy in setups:
        speed = run(workers, pool)
        base = base or speed
        print(f"| {name} | {busy} | {speed:,.0f} | {speed / base:.2f}x |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller corpus, fewer repeats")
    parser.add_argument("--num-utts", type=int, default=None, help="corpus size (utterances)")
    parser.add_argument("--skip-loader", action="store_true")
    args = parser.parse_args()
    bench_extractors(repeats=3 if args.quick else 10)
    if not args.skip_loader:
        bench_loader(args.num_utts or (80 if args.quick else 300), epochs=1 if args.quick else 2)


if __name__ == "__main__":
    main()
