"""``wenet-lhotse cmvn`` next to WeNet's ``tools/compute_cmvn_stats.py``, in one run.

Usage (from the repository root; needs WeNet's source, ``$WENET_ROOT`` or
``../shared/wenet``)::

    python bench/cmvn.py              # 400 utterances of 1-6 s (~23 min of audio)
    python bench/cmvn.py --quick      # 80 utterances

On one generated corpus (16 kHz WAV, raw list + shards, a yaml with the aishell recipe's
``fbank_conf`` and ``resample_conf``) it prints:

* the largest relative difference of ``mean_stat`` / ``var_stat`` between WeNet's tool
  (unmodified, run with the test harness' stand-ins: torchaudio's own ``kaldi.py``) and
  ours on the raw list and on the shards, and whether ``frame_num`` agrees;
* wall seconds of ours serial (``-j 1``) and with 2 processes (``-j 2``) on the raw list,
  best of ``--rounds`` interleaved runs, and their ratio; WeNet's tool's wall time
  (``--num_workers 0``, and 2) for reference. Process start-up is included everywhere;
* the same two without start-up: ``compute_cmvn`` called in this process (after one
  warm-up call), ``num_jobs=1`` vs ``num_jobs=2``, best of ``--rounds`` interleaved.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _paths  # noqa: F401  (the repository root on sys.path: wenet_harness)
import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    from wenet_harness import wenet_env, wenet_missing, wenet_root
    from wenet_lhotse.corpus import generate_corpus

    reason = wenet_missing()
    if reason:
        sys.exit(f"cannot run WeNet's tool: {reason}")
    n = 80 if args.quick else 400
    tmp = Path(tempfile.mkdtemp(prefix="cmvn_bench_"))
    c = generate_corpus(tmp / "c", num_utterances=n, min_duration=1.0, max_duration=6.0,
                        shard_size=50, seed=3)
    conf = tmp / "train.yaml"
    conf.write_text(yaml.safe_dump({"dataset_conf": {
        "resample_conf": {"resample_rate": 16000},
        "fbank_conf": {"num_mel_bins": 80, "frame_shift": 10, "frame_length": 25,
                       "dither": 0.1}}}))
    print(f"corpus: {n} utterances, {c.total_duration / 60:.1f} min of 16 kHz audio; "
          f"machine: {os.cpu_count()} CPUs")

    def wenet(workers: int) -> float:
        t = time.perf_counter()
        subprocess.run([sys.executable, str(wenet_root() / "tools" / "compute_cmvn_stats.py"),
                        "--num_workers", str(workers), "--train_config", str(conf),
                        "--in_scp", str(c.wav_scp), "--out_cmvn", str(tmp / "wenet.json")],
                       env=wenet_env(), check=True, capture_output=True)
        return time.perf_counter() - t

    def ours(src: Path, jobs: int, out: str) -> float:
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "wenet_lhotse", "cmvn", str(src), "-c", str(conf),
                        "-o", str(tmp / out), "-j", str(jobs)],
                       env=dict(os.environ, PYTHONPATH=str(ROOT)), check=True,
                       capture_output=True)
        return time.perf_counter() - t

    times = {"wenet -j0": [], "wenet -j2": [], "ours -j1": [], "ours -j2": []}
    for _ in range(args.rounds):
        times["wenet -j0"].append(wenet(0))
        times["ours -j1"].append(ours(c.data_list, 1, "raw1.json"))
        times["ours -j2"].append(ours(c.data_list, 2, "raw2.json"))
        times["wenet -j2"].append(wenet(2))
    ours(c.shards_list, 2, "shards.json")
    ref = json.loads((tmp / "wenet.json").read_text())
    for name in ("raw1.json", "raw2.json", "shards.json"):
        got = json.loads((tmp / name).read_text())
        rel = max(float(np.max(np.abs(np.subtract(got[k], ref[k])) / np.abs(ref[k])))
                  for k in ("mean_stat", "var_stat"))
        print(f"{name:12s} max rel diff vs WeNet's tool {rel:.2e}, frame_num "
              f"{'equal' if got['frame_num'] == ref['frame_num'] else 'DIFFERENT'} "
              f"({got['frame_num']})")
    from wenet_lhotse.convert.cmvn import compute_cmvn

    dconf = yaml.safe_load(conf.read_text())["dataset_conf"]
    compute_cmvn(c.data_list, dconf)  # warm-up: imports, kernels, page cache
    for _ in range(args.rounds):
        for jobs in (1, 2):
            t = time.perf_counter()
            compute_cmvn(c.data_list, dconf, num_jobs=jobs)
            times.setdefault(f"in-process -j{jobs}", []).append(time.perf_counter() - t)
    best = {k: min(v) for k, v in times.items()}
    for k, v in best.items():
        print(f"{k:17s} best of {args.rounds}: {v:6.2f} s wall")
    print(f"in-process -j2 vs -j1: {best['in-process -j1'] / best['in-process -j2']:.2f}x "
          f"({c.total_duration / best['in-process -j2']:.0f} s of audio per second at -j2)")
    print(f"ours -j2 vs -j1: {best['ours -j1'] / best['ours -j2']:.2f}x; "
          f"ours -j1 vs WeNet's tool --num_workers 0: {best['wenet -j0'] / best['ours -j1']:.2f}x")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
