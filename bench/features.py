"""Feature extraction and pooled-loader throughput, measured side by side in one run.

Usage (from the repository root)::

    python bench/features.py                      # full run, ~2-3 min on 2 cores
    python bench/features.py --quick              # smaller corpus and fewer repeats

Part 1 (one thread, ``torch.set_num_threads(1)``): seconds of audio per second of CPU
for ``WenetFbank`` vs torchaudio's ``compliance.kaldi.fbank`` with WeNet's arguments vs
Lhotse's ``Fbank``; and max abs difference to torchaudio. The torchaudio reference is the
one the feature tests use (``wenet_harness.kaldi_reference``): an installed torchaudio,
else torchaudio 2.11.0's ``kaldi.py`` copied unchanged into the WeNet harness -- no
set-up. At dither 0.1 the two sides draw their noise differently: torchaudio draws fresh
Gaussian noise for every sample of every frame (``torch.randn``), ``WenetFbank`` adds
noise once per waveform sample, sliced from a table drawn once per process
(``features/dither.py``); the ratio includes that cheaper draw.

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
import warnings
from typing import Callable, Dict

import _paths  # noqa: F401  (the repository root on sys.path: wenet_harness)
import numpy as np
import torch

from wenet_harness import kaldi_reference
from wenet_lhotse.corpus import generate_corpus, synthesize
from wenet_lhotse.features import PooledFeatures, WenetFbank, WenetFbankConfig


def interleaved_best(candidates: Dict[str, Callable[[], object]], rounds: int) -> Dict[str, float]:
    """Best wall time (s) of each candidate, timed round-robin so that load from other
    processes on a shared machine hits all candidates alike."""
    for fn in candidates.values():
        fn()  # warm-up: caches, allocator, worker start-up
    best = {name: float("inf") for name in candidates}
    for _ in range(rounds):
        for name, fn in candidates.items():
            t0 = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - t0)
    return best


def bench_extractors(repeats: int) -> None:
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    waves = [synthesize("abcd efg hijk lmnop " * 3, 16000, rng) for _ in range(8)]
    seconds = sum(len(w) for w in waves) / 16000
    kaldi, origin = kaldi_reference()
    print(f"\n## Extraction, 1 thread: {len(waves)} utterances, {seconds:.1f} s of 16 kHz "
          f"audio, 80 bins\ntorchaudio reference: {origin}\n")
    print("| extractor | dither | audio s / s | vs torchaudio | max abs diff |")
    print("|---|---|---|---|---|")
    tensors = [torch.from_numpy(w).unsqueeze(0) for w in waves]
    for dither in (0.0, 0.1):
        _extractor_rows(dither, waves, tensors, seconds, kaldi, repeats)
    print("\ndither 0.1 rows: torchaudio draws fresh Gaussian noise for every sample of "
          "every frame (torch.randn); WenetFbank adds noise once per waveform sample, "
          "sliced from a table drawn once per process (features/dither.py): not the same "
          "noise (no diff column), and a cheaper draw (part of the ratio).")
    torch.set_num_threads(os.cpu_count() or 1)


def _extractor_rows(dither, waves, tensors, seconds, kaldi, repeats) -> None:
    ours = WenetFbank(WenetFbankConfig(num_mel_bins=80, dither=dither))
    candidates: Dict[str, Callable[[], object]] = {}
    if kaldi is not None:
        def ta():
            return [kaldi.fbank(w * 32768, num_mel_bins=80, frame_length=25, frame_shift=10,
                                dither=dither, energy_floor=0.0, sample_frequency=16000)
                    for w in tensors]
        candidates["torchaudio kaldi.fbank"] = ta
    candidates["WenetFbank.extract"] = lambda: [ours.extract(w, 16000) for w in tensors]
    candidates["WenetFbank.extract_batch"] = lambda: ours.extract_batch(waves, 16000)
    diffs = {}
    if dither == 0.0:
        from lhotse import Fbank, FbankConfig

        lh = Fbank(FbankConfig(num_filters=80))
        candidates["lhotse Fbank (its defaults)"] = lambda: [lh.extract(w, 16000) for w in waves]
        diffs["lhotse Fbank (its defaults)"] = "n/a (other features)"
        if kaldi is not None:
            ref = [r.numpy() for r in candidates["torchaudio kaldi.fbank"]()]
            for name in ("WenetFbank.extract", "WenetFbank.extract_batch"):
                ours_out = [np.asarray(o) for o in candidates[name]()]
                diffs[name] = f"{max(np.abs(a - b).max() for a, b in zip(ref, ours_out)):.1e}"
    best = interleaved_best(candidates, repeats)
    t_ta = best.get("torchaudio kaldi.fbank")
    if t_ta is None:
        print(f"| torchaudio kaldi.fbank | {dither} | (not available) | | |")
    for name, t in best.items():
        rel = f"{t_ta / t:.2f}x" if t_ta else ""
        print(f"| {name} | {dither} | {seconds / t:,.0f} | {rel} | {diffs.get(name, '')} |")


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


def _spin(n: int) -> float:
    t0 = time.perf_counter()
    s = 0
    for i in range(n):
        s += i * i
    return time.perf_counter() - t0


def _tree_cpu_seconds():
    """User+system CPU seconds of this process and all its descendants (DataLoader
    workers, pool workers), or None without psutil. The loader table's last column
    is the CPU cost of the pipeline, which, unlike speed, a busy machine does not hide."""
    try:
        import psutil
    except ImportError:
        return None
    me = psutil.Process()
    total = 0.0
    for p in [me, *me.children(recursive=True)]:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return total


def cpu_scaling() -> float:
    """How much more pure-Python work 2 processes do than 1 right now (2.0 on an idle
    machine with >= 2 free cores): read the pool ratios against it."""
    import multiprocessing as mp

    n = 3_000_000
    one = min(_spin(n) for _ in range(3))
    with mp.get_context("fork").Pool(2) as pool:
        two = min(max(pool.map(_spin, [n, n])) for _ in range(3))
    return 2 * one / two


def bench_loader(num_utts: int, rounds: int) -> None:
    from lhotse.dataset import DynamicBucketingSampler

    tmp = tempfile.mkdtemp(prefix="wenet_lhotse_bench_")
    paths = generate_corpus(tmp, num_utterances=num_utts, duration_dist="realistic",
                            min_duration=1.0, max_duration=15.0, seed=0)
    cuts = load_cuts(str(paths.data_list))
    total = paths.total_duration
    print(f"\n## Loader throughput: {num_utts} utterances, {total / 60:.1f} min of audio, "
          f"train augmentation (speed perturb, dither 0.1, spec_aug), best of {rounds} "
          f"epochs (round-robin over setups) after a warm-up epoch, {os.cpu_count()} CPUs\n")
    print(f"CPU check: 2 processes do {cpu_scaling():.2f}x the work of 1 right now "
          "(2.00 = two free cores)\n")
    print("| setup | busy processes | audio s / s | vs pool 1 | CPU ms / audio s |")
    print("|---|---|---|---|---|")
    extractor = WenetFbank(WenetFbankConfig(num_mel_bins=80, dither=0.1))

    setups = [  # name, DataLoader workers, pool workers, busy processes
        ("pool 1, no DataLoader workers", 0, 1, 1),
        ("(a) DataLoader workers 2, pool 0", 2, 0, 2),
        ("(b) pool 2, no DataLoader workers", 0, 2, 2),
        ("(c) DataLoader worker 1 + pool 2", 1, 2, 2),
        ("in-process (DataLoader workers 0, pool 0)", 0, 0, 1),
    ]
    features, loaders, epochs_of = [], [], {}
    cpu: Dict[str, float] = {}
    for name, loader_workers, pool, _ in setups:
        f = PooledFeatures(extractor, num_workers=pool, speed_perturb=True, spec_aug=True,
                           seed=0)
        sampler = DynamicBucketingSampler(cuts, max_duration=120.0, num_buckets=4,
                                          shuffle=False)
        loader = torch.utils.data.DataLoader(
            _Dataset(f), sampler=sampler, batch_size=None, num_workers=loader_workers,
            persistent_workers=loader_workers > 0)
        features.append(f)
        loaders.append(loader)

        def epoch(loader=loader, name=name) -> None:
            cpu0 = _tree_cpu_seconds()
            seconds = sum(dur for _, dur in loader)
            assert abs(seconds - total) < 1.0, (seconds, total)
            if cpu0 is not None:
                used = _tree_cpu_seconds() - cpu0
                cpu[name] = min(cpu.get(name, float("inf")), used)

        epochs_of[name] = epoch
    try:
        best = interleaved_best(epochs_of, rounds)
    finally:
        for f in features:
            f.close()
        del loaders
    base = total / best[setups[0][0]]
    for name, _, _, busy in setups:
        speed = total / best[name]
        cost = f"{1000 * cpu[name] / total:.2f}" if name in cpu else "(needs psutil)"
        print(f"| {name} | {busy} | {speed:,.0f} | {speed / base:.2f}x | {cost} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller corpus, fewer repeats")
    parser.add_argument("--num-utts", type=int, default=None, help="corpus size (utterances)")
    parser.add_argument("--skip-loader", action="store_true")
    args = parser.parse_args()
    warnings.filterwarnings("ignore", message=".*eagerly read CutSet.*")
    bench_extractors(repeats=3 if args.quick else 15)
    if not args.skip_loader:
        bench_loader(args.num_utts or (80 if args.quick else 300), rounds=2 if args.quick else 4)


if __name__ == "__main__":
    main()
