"""bench/features.py runs end to end and prints its tables (figures are not asserted)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_features_bench_runs_quick():
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    env.pop("WENET_LHOTSE_KALDI_PY", None)
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "features.py"), "--quick", "--num-utts", "12"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "| WenetFbank.extract | 0.0 |" in out.stdout
    # the tests' torchaudio reference, with no set-up (no WENET_LHOTSE_KALDI_PY)
    assert "| torchaudio kaldi.fbank | 0.0 |" in out.stdout and "(not available)" not in out.stdout
    assert "| lhotse Fbank (its defaults) | 0.0 |" in out.stdout
    for row in ("(a) DataLoader workers 2, pool 0", "(b) pool 2, no DataLoader workers",
                "(c) DataLoader worker 1 + pool 2"):
        assert f"| {row} | 2 |" in out.stdout
