"""The README's first command, at reduced size: corpus -> import -> train (1 process and
2 DDP ranks via torchrun/gloo) -> plot."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_demo_quick_end_to_end(tmp_path):
    out = tmp_path / "demo"
    res = subprocess.run([sys.executable, "-m", "wenet_lhotse", "demo", "--quick", "-o", str(out)],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "[5/5] done" in res.stdout
    assert (out / "demo.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / "data" / "train" / "cuts.jsonl.gz").exists()
    assert sorted(p.name for p in (out / "data" / "train" / "shar").glob("cuts.*.jsonl.gz"))
    for run in ("single", "ddp"):
        hist = json.loads((out / "exp" / run / "history.json").read_text())
        assert len(hist) == 2
        assert hist[-1]["train_loss"] < hist[0]["train_loss"]  # it learns
        assert all(h["cv_loss"] is not None and h["throughput"] > 0 for h in hist)
        assert all(0.0 <= h["padding_fraction"] < 0.5 for h in hist)
        assert (out / "exp" / run / "final.pt").exists()
    # the table rows of both runs reached the user
    assert res.stdout.count("batches/rank") == 2
