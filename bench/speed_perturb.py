"""Speed perturbation (sox ``speed f`` + ``rate sr``): ours vs the alternatives, per core.

Candidates, on the same utterances (16 kHz, 1-15 s), factors 0.9 and 1.1, one torch
thread, CPU time summed over ``--rounds`` round-robin rounds (load from other processes
hits all alike). Every round draws new lengths, as a training epoch does: no shape
repeats (oneDNN's ``conv1d`` builds and caches a primitive per input length, so
repeating lengths would flatter it).

* ours: ``wenet_lhotse.features.augment.speed_perturb`` (Lhotse's sinc kernel as one
  matrix product over a strided view; sox's output length);
* Lhotse ``Speed`` (the same kernel through a strided ``conv1d``; ceil length);
* libsox itself (``soxbindings``, when installed: ``apt-get install libsox-dev; pip
  install soxbindings``): WeNet's chain ``[['speed', f], ['rate', sr]]`` as
  ``torchaudio.sox_effects.apply_effects_tensor`` runs it -- float32 to sox's 32-bit
  samples, the two effects, back -- through the WeNet harness's ``sox_effects``, which
  hands it to libsox where soxbindings is present: WeNet's own speed perturbation;
* libsoxr ``HQ`` (``soxr`` package, when installed): the resampler library that came out
  of sox's ``rate`` effect, which WeNet's ``torchaudio.sox_effects`` chain ends in; the
  closest to WeNet's sox path that runs without libsox (sox itself also converts the
  tensor to 32-bit integer samples and back, which is not counted here);
* torchaudio's ``functional.resample`` (as WeNet's stand-in in ``wenet_harness``
  runs it, when the harness is present): it rebuilds the kernel on every call.

Printed: audio seconds per CPU second and the ratio to ours; the output length of each
against sox's ``floor(n / f + 0.5)``.

Run: ``python bench/speed_perturb.py [--num-utts 40] [--rounds 5]``.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path
from typing import Callable, Dict

import _paths  # noqa: F401  (the repository root on sys.path: wenet_harness)
import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]


def harness_resample():
    """torchaudio's ``functional.resample`` from the WeNet harness's verbatim copy."""
    path = REPO / "wenet_harness" / "stubs" / "torchaudio" / "functional.py"
    if not path.is_file():
        return None
    spec = importlib.util.spec_from_file_location("_ta_functional", path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception:  # noqa: BLE001 -- optional candidate
        return None
    return getattr(module, "resample", None)


def harness_sox_effects():
    """The WeNet harness's ``torchaudio.sox_effects`` (libsox where soxbindings is
    installed), or None without the harness."""
    try:
        from wenet_harness import sox_effects

        return sox_effects()
    except Exception:  # noqa: BLE001 -- optional candidate
        return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--num-utts", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(1)
    from lhotse.augmentation.torchaudio import Speed

    from wenet_lhotse.features.augment import speed_perturb

    sr = 16000
    rng = np.random.default_rng(0)
    base = (0.1 * rng.standard_normal(sr * 16)).astype(np.float32)

    def draw():  # fresh lengths (samples), all distinct
        return [base[: int(sr * d)].copy() for d in rng.uniform(1.0, 15.0, args.num_utts)]

    factors = (0.9, 1.1)

    cands: Dict[str, Callable[[np.ndarray, float], object]] = {
        "ours": lambda w, f: speed_perturb(w, sr, f),
        "Lhotse Speed (conv1d)": lambda w, f: Speed(factor=f)(w.reshape(1, -1), sr)[0],
    }
    sox_effects = harness_sox_effects()
    if sox_effects is not None and sox_effects.BACKEND.startswith("libsox"):
        def libsox(w, f):
            return sox_effects.apply_effects_tensor(
                torch.from_numpy(w)[None], sr, [["speed", str(f)], ["rate", str(sr)]])[0][0]

        cands["libsox speed + rate (WeNet's sox_effects chain)"] = libsox
    else:
        print("libsox: not installed (apt-get install libsox-dev; pip install soxbindings), "
              "row skipped")
    if importlib.util.find_spec("soxr") is not None:
        import soxr

        cands["libsoxr HQ (sox's resampler)"] = lambda w, f: soxr.resample(w, sr * f, sr, "HQ")
    else:
        print("libsoxr: not installed (pip install soxr), row skipped")
    ta_resample = harness_resample()
    if ta_resample is not None:
        from fractions import Fraction

        def ta(w, f):
            q = Fraction(str(f))
            return ta_resample(torch.from_numpy(w), sr * q.numerator, sr * q.denominator)

        cands["torchaudio resample (WeNet harness stand-in)"] = ta
    else:
        print("torchaudio resample: wenet_harness not present, row skipped")

    def run_all(fn, waves):
        return [fn(w, f) for w in waves for f in factors]

    warm = draw()
    lengths = {name: run_all(fn, warm) for name, fn in cands.items()}  # warm-up + lengths
    sox_len = [int(len(w) / f + 0.5) for w in warm for f in factors]
    cpu = {name: 0.0 for name in cands}
    seconds = 0.0
    for _ in range(args.rounds):
        waves = draw()
        seconds += sum(len(w) for w in waves) / sr * len(factors)
        for name, fn in cands.items():
            t0 = time.process_time()
            run_all(fn, waves)
            cpu[name] += time.process_time() - t0
    print(f"{args.num_utts} utterances x {args.rounds} rounds, {seconds:.0f} s of 16 kHz "
          f"audio perturbed (factors {factors}); 1 torch thread\n")
    print("| implementation | audio s / CPU s | vs ours | length = sox's floor(n/f+0.5) |")
    print("|---|---|---|---|")
    for name, t in cpu.items():
        same = sum(int(np.asarray(y).shape[-1]) == n for y, n in zip(lengths[name], sox_len))
        print(f"| {name} | {seconds / t:,.0f} | {cpu['ours'] / t:.2f}x | "
              f"{same}/{len(sox_len)} |")


if __name__ == "__main__":
    sys.exit(main())
