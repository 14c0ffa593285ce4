"""Every recipe stage that needs no real corpus, on tiny generated data (`--fake_data true`).

Stages 0-4 (data prep, raw lists, units, validate/stats, import to Shar and cuts),
stages 5-6 (WeNet's own train.py and recognize.py through the launcher, on CPU with the
tiny conformer, with the WeNet checkout at ``$WENET_ROOT`` and no test stand-in on
``PYTHONPATH``) and stage 7 (our recipe trainer through torchrun) run for real. The
``wenet-lhotse`` the scripts call is the ``cli_bin`` fixture's (tests/cli_server.py: each
command its own process, forked from a server that imported the CLI once)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from guards import guarded_import
from lhotse import CutSet

ROOT = Path(__file__).resolve().parents[1]


def run_recipe(tmp_path: Path, cli_bin: Path, name: str, *args: str) -> Path:
    """Run recipes/NAME/run.sh ARGS in a copy of recipes/ (run.sh writes data/ beside itself),
    with ``cli_bin``'s ``wenet-lhotse`` first on ``PATH``."""
    if not (tmp_path / "recipes").exists():
        shutil.copytree(ROOT / "recipes", tmp_path / "recipes")
    env = dict(os.environ, PATH=f"{cli_bin}:{Path(sys.executable).parent}:{os.environ['PATH']}",
               PYTHONPATH=str(ROOT))
    res = subprocess.run(["bash", f"recipes/{name}/run.sh", *args], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return tmp_path / "recipes" / name


@pytest.fixture(scope="module")
def aishell(tmp_path_factory, cli_bin):
    """A copy of recipes/ with aishell's stages 0-4 run on generated data."""
    tmp_path = tmp_path_factory.mktemp("aishell")
    run_recipe(tmp_path, cli_bin, "aishell", "--fake_data", "true", "--stage", "0",
               "--stop_stage", "4", "--nj", "2")
    return tmp_path


@pytest.mark.slow
def test_aishell_recipe_stages(aishell, cli_bin):
    tmp_path = aishell
    d = tmp_path / "recipes" / "aishell"
    for x in ("train", "dev", "test"):
        assert (d / "data" / x / "data.list").exists()
    table = (d / "data" / "dict" / "lang_char.txt").read_text(encoding="utf-8").splitlines()
    assert table[:3] == ["<blank> 0", "<unk> 1", "<sos/eos> 2"]  # the yaml's special_tokens
    cmvn = json.loads((d / "data" / "train" / "global_cmvn").read_text())
    assert len(cmvn["mean_stat"]) == 80 and cmvn["frame_num"] > 0
    assert (d / "data" / "train" / "stats.png").exists()
    assert len(CutSet.from_shar(in_dir=d / "data" / "train" / "shar").to_eager()) == 60
    assert len(CutSet.from_file(d / "data" / "dev" / "cuts.jsonl.gz")) == 16
    # stage 7: our trainer on the imported data (1 epoch), via torchrun
    run_recipe(tmp_path, cli_bin, "aishell", "--stage", "7", "--stop_stage", "7",
               "--max_epoch", "1")
    hist = json.loads((d / "exp" / "tiny" / "history.json").read_text())
    assert len(hist) == 1 and hist[0]["cv_loss"] is not None


@pytest.mark.slow
def test_librispeech_recipe_stages(tmp_path, cli_bin):
    guarded_import("sentencepiece")
    d = run_recipe(tmp_path, cli_bin, "librispeech", "--fake_data", "true", "--stage", "0",
                   "--stop_stage", "4", "--nj", "2")
    run_recipe(tmp_path, cli_bin, "librispeech", "--fake_data", "true", "--stage", "7",
               "--stop_stage", "7", "--max_epoch", "1")
    assert (d / "data" / "lang_char" / "train_960_unigram5000.model").exists()
    assert len(CutSet.from_shar(in_dir=d / "data" / "train_960" / "shar").to_eager()) == 60
    hist = json.loads((d / "exp" / "tiny_bpe" / "history.json").read_text())
    assert len(hist) == 1 and hist[0]["train_loss"] > 0


@pytest.mark.slow
def test_aishell_wenet_train_and_recognize_on_cpu(aishell, wenet_root, cli_bin):
    """Stages 5-6 as the documented CPU trial: WeNet's train.py (tiny conformer, 1 epoch,
    gloo) on the Shar train set and cuts dev set, then WeNet's recognize.py on the test
    list and WeNet's compute-wer.py; $dir did not exist before stage 5."""
    d = aishell / "recipes" / "aishell"
    assert not (d / "exp" / "tiny_conformer").exists()
    out = run_recipe(aishell, cli_bin, "aishell", "--stage", "5", "--stop_stage", "6",
                     "--wenet_dir", str(wenet_root), "--device", "cpu",
                     "--dist_backend", "gloo", "--num_workers", "1",
                     "--train_config", "conf/train_conformer_tiny.yaml",
                     "--dir", "exp/tiny_conformer",
                     "--decode_modes", "ctc_greedy_search attention")
    exp = out / "exp" / "tiny_conformer"
    assert (exp / "train.yaml").is_file() and (exp / "epoch_0.pt").is_file()
    assert yaml.safe_load((exp / "epoch_0.yaml").read_text())["step"] > 0
    test_keys = {line.split()[0] for line in
                 (d / "data" / "test" / "text").read_text(encoding="utf-8").splitlines()}
    for mode in ("ctc_greedy_search", "attention"):
        hyps = (exp / mode / "text").read_text(encoding="utf-8").splitlines()
        assert {line.split(" ", 1)[0] for line in hyps} == test_keys  # every utterance
        assert "Overall ->" in (exp / mode / "wer").read_text(encoding="utf-8")


def test_stage_needing_wenet_says_so(tmp_path):
    shutil.copytree(ROOT / "recipes", tmp_path / "recipes")
    res = subprocess.run(["bash", "recipes/aishell/run.sh", "--stage", "5", "--stop_stage", "5"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert res.returncode != 0 and "needs --wenet_dir" in res.stdout
    res = subprocess.run(["bash", "recipes/aishell/run.sh", "--no_such_option", "1"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert res.returncode != 0 and "unknown option --no_such_option" in res.stderr
