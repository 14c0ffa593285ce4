"""Every recipe stage that needs no real corpus, on tiny generated data (`--fake_data true`).

Stages 0-4 (data prep, raw lists, units, validate/stats, import to Shar and cuts) and
stage 6 (our recipe trainer through torchrun) run for real; stage 5 needs a WeNet
checkout and is covered by tests/test_wenet_train.py's runner test."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from guards import guarded_import
from lhotse import CutSet

ROOT = Path(__file__).resolve().parents[1]


def run_recipe(tmp_path: Path, name: str, *args: str) -> Path:
    """Run recipes/NAME/run.sh ARGS in a copy of recipes/ (run.sh writes data/ beside itself)."""
    if not (tmp_path / "recipes").exists():
        shutil.copytree(ROOT / "recipes", tmp_path / "recipes")
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}",
               PYTHONPATH=str(ROOT))
    res = subprocess.run(["bash", f"recipes/{name}/run.sh", *args], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return tmp_path / "recipes" / name


@pytest.mark.slow
def test_aishell_recipe_stages(tmp_path):
    d = run_recipe(tmp_path, "aishell", "--fake_data", "true", "--stage", "0",
                   "--stop_stage", "4", "--nj", "2")
    for x in ("train", "dev", "test"):
        assert (d / "data" / x / "data.list").exists()
    table = (d / "data" / "dict" / "lang_char.txt").read_text(encoding="utf-8").splitlines()
    assert table[:3] == ["<blank> 0", "<unk> 1", "<sos/eos> 2"]  # the yaml's special_tokens
    cmvn = json.loads((d / "data" / "train" / "global_cmvn").read_text())
    assert len(cmvn["mean_stat"]) == 80 and cmvn["frame_num"] > 0
    assert (d / "data" / "train" / "stats.png").exists()
    assert len(CutSet.from_shar(in_dir=d / "data" / "train" / "shar").to_eager()) == 60
    assert len(CutSet.from_file(d / "data" / "dev" / "cuts.jsonl.gz")) == 16
    # stage 6: our trainer on the imported data (1 epoch), via torchrun
    run_recipe(tmp_path, "aishell", "--stage", "6", "--stop_stage", "6", "--max_epoch", "1")
    hist = json.loads((d / "exp" / "tiny" / "history.json").read_text())
    assert len(hist) == 1 and hist[0]["cv_loss"] is not None


@pytest.mark.slow
def test_librispeech_recipe_stages(tmp_path):
    guarded_import("sentencepiece")
    d = run_recipe(tmp_path, "librispeech", "--fake_data", "true", "--stage", "0",
                   "--stop_stage", "4", "--nj", "2")
    run_recipe(tmp_path, "librispeech", "--fake_data", "true", "--stage", "6",
               "--stop_stage", "6", "--max_epoch", "1")
    assert (d / "data" / "lang_char" / "train_960_unigram5000.model").exists()
    assert len(CutSet.from_shar(in_dir=d / "data" / "train_960" / "shar").to_eager()) == 60
    hist = json.loads((d / "exp" / "tiny_bpe" / "history.json").read_text())
    assert len(hist) == 1 and hist[0]["train_loss"] > 0


def test_stage_needing_wenet_says_so(tmp_path):
    shutil.copytree(ROOT / "recipes", tmp_path / "recipes")
    res = subprocess.run(["bash", "recipes/aishell/run.sh", "--stage", "5", "--stop_stage", "5"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert res.returncode != 0 and "needs --wenet_dir" in res.stdout
    res = subprocess.run(["bash", "recipes/aishell/run.sh", "--no_such_option", "1"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert res.returncode != 0 and "unknown option --no_such_option" in res.stderr
