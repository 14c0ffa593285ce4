"""The speed benchmarks run end to end and print their tables (figures are not asserted)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run(*args: str) -> str:
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    out = subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def test_speed_perturb_bench_runs():
    out = run("bench/speed_perturb.py", "--num-utts", "4", "--rounds", "1")
    assert "| ours |" in out and "| Lhotse Speed (conv1d) |" in out
    # ours has sox's length on every utterance
    row = next(line for line in out.splitlines() if line.startswith("| ours |"))
    assert row.rstrip(" |").endswith("8/8")


@pytest.mark.slow
def test_wenet_baseline_bench_runs(wenet_root):
    out = run("bench/wenet_baseline.py", "--quick", "--types", "raw")
    assert "| WeNet | raw | no |" in out and "| ours | raw | yes |" in out
    assert "ours vs WeNet, raw, speed perturb off: throughput" in out


@pytest.mark.slow
def test_profile_bench_runs():
    out = run("bench/profile_loader.py", "--num-utts", "30", "--types", "raw")
    for stage in ("| decode |", "| speed perturb |", "| fbank |", "| **total** |"):
        assert stage in out
