"""`python -m wenet_lhotse.wenet_train` runs a WeNet-style train.py on our loader.

WeNet itself is not on PyPI, so this builds a stand-in with WeNet's module layout and
calling convention (``wenet/bin/train.py`` doing ``from wenet.utils.train_utils import
init_dataset_and_dataloader`` at import time, WeNet's argparse choices, a tokenizer
class of its own). What is under test is our runner's patching and our drop-in, run
in a real subprocess; against a real WeNet checkout the recipes' stage 5 does the same.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]

TRAIN_UTILS = """
def init_dataset_and_dataloader(args, configs, tokenizer, seed=777):
    raise RuntimeError("WeNet's own loader was called")
"""

TRAIN_PY = """
import argparse, json, yaml
from wenet.utils.train_utils import init_dataset_and_dataloader


class Tokenizer:  # WeNet's CharTokenizer interface, not ours
    def __init__(self, path):
        self.table = dict(l.split() for l in open(path, encoding="utf-8"))
    def tokenize(self, line):
        toks = ["\\u2581" if c == " " else c for c in line.strip()]
        return toks, [int(self.table.get(t, 1)) for t in toks]
    def vocab_size(self):
        return len(self.table)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--config", required=True)
    p.add_argument("--data_type", default="raw", choices=["raw", "shard"])
    p.add_argument("--train_data", required=True)
    p.add_argument("--cv_data", required=True)
    p.add_argument("--num_workers", type=int, default=0)
    p.add_argument("--pin_memory", action="store_true")
    p.add_argument("--prefetch", type=int, default=100)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    configs = yaml.safe_load(open(args.config))
    tok = Tokenizer(configs["tokenizer_conf"]["symbol_table_path"])
    train_ds, cv_ds, train_dl, cv_dl = init_dataset_and_dataloader(args, configs, tok)
    batch = next(iter(train_dl))
    cv_keys = [k for b in cv_dl for k in b["keys"]]
    json.dump({"vocab_size": configs["vocab_size"], "batch_keys": sorted(batch),
               "feats_shape": list(batch["feats"].shape), "cv_keys": cv_keys,
               "loader": type(train_dl).__module__}, open(args.out, "w"))


if __name__ == "__main__":
    main()
"""


def make_standin(root: Path) -> None:
    for d in ("wenet", "wenet/utils", "wenet/bin"):
        (root / d).mkdir(parents=True, exist_ok=True)
        (root / d / "__init__.py").write_text("")
    (root / "wenet/utils/train_utils.py").write_text(textwrap.dedent(TRAIN_UTILS))
    (root / "wenet/bin/train.py").write_text(textwrap.dedent(TRAIN_PY))


@pytest.mark.parametrize("train_kind", ["raw", "shar"])
def test_runner_puts_our_loader_under_wenet_train_py(tmp_path, corpus, train_kind):
    make_standin(tmp_path / "wenet_src")
    train_data = corpus.data_list
    if train_kind == "shar":  # passed as WeNet's --data_type raw: detected from the path
        from wenet_lhotse.convert import wenet_to_shar

        train_data = wenet_to_shar(corpus.data_list, tmp_path / "shar", shard_size=8).out_dir
    conf = {"dataset_conf": {"fbank_conf": {"num_mel_bins": 40, "dither": 0.0},
                             "batch_conf": {"batch_type": "static", "batch_size": 4}},
            "tokenizer_conf": {"symbol_table_path": str(corpus.units)}}
    (tmp_path / "conf.yaml").write_text(yaml.safe_dump(conf))
    out = tmp_path / "out.json"
    env = dict(os.environ, PYTHONPATH=f"{tmp_path / 'wenet_src'}:{ROOT}")
    res = subprocess.run(
        [sys.executable, "-m", "wenet_lhotse.wenet_train", "--config", str(tmp_path / "conf.yaml"),
         "--data_type", "raw", "--train_data", str(train_data),
         "--cv_data", str(corpus.data_list), "--num_workers", "0", "--out", str(out)],
        env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    got = json.loads(out.read_text())
    assert got["loader"].startswith("wenet_lhotse.")
    assert got["vocab_size"] == len(corpus.units.read_text().splitlines())
    assert {"keys", "feats", "feats_lengths", "target", "target_lengths"} <= set(got["batch_keys"])
    assert got["feats_shape"][2] == 40
    assert sorted(got["cv_keys"]) == sorted(corpus.keys)  # the whole cv set, once


def test_runner_without_wenet_says_how_to_fix(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    res = subprocess.run([sys.executable, "-m", "wenet_lhotse.wenet_train", "--config", "x"],
                         env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert res.returncode != 0 and "WeNet is not importable" in res.stderr
