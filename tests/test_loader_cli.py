"""``wenet-lhotse bench``: the command shown in docs/distributed.md, on a real corpus."""

from __future__ import annotations

import re

import yaml
from click.testing import CliRunner

from wenet_lhotse.cli import main

TRAIN_YAML = {
    "dataset_conf": {
        "fbank_conf": {"num_mel_bins": 80, "frame_shift": 10, "frame_length": 25,
                       "dither": 0.1},
        "spec_aug": True,
        "batch_conf": {"batch_type": "dynamic", "max_frames_in_batch": 1500},
    }
}


def test_bench_prints_loader_figures(corpus, tmp_path):
    cfg = tmp_path / "train.yaml"
    cfg.write_text(yaml.safe_dump({**TRAIN_YAML, "tokenizer": "char",
                                   "tokenizer_conf": {"symbol_table_path": str(corpus.units)}}))
    # The snippet from docs/distributed.md:
    #   wenet-lhotse bench train.yaml --data data/train/data.list -n 20 --num-workers 1
    res = CliRunner().invoke(main, ["bench", str(cfg), "--data", str(corpus.data_list),
                                    "-n", "20", "--num-workers", "1"])
    assert res.exit_code == 0, res.output
    batches = int(re.search(r"batches:\s+(\d+)", res.output).group(1))
    utts = int(re.search(r"utterances:\s+(\d+)", res.output).group(1))
    assert 1 <= batches <= 20 and utts == 20  # 20 utterances fit in < 20 batches
    if batches < 20:  # and the bench says why it read fewer than -n (issue 32)
        assert (f"batches:            {batches} (of -n 20: one epoch of this data has only "
                f"{batches} batches; the bench reads one epoch)") in res.output
    assert float(re.search(r"throughput:\s+([\d.]+)", res.output).group(1)) > 0
    pad = float(re.search(r"padding:\s+([\d.]+)", res.output).group(1))
    assert 0 <= pad < 100


def test_bench_needs_data(corpus, tmp_path):
    cfg = tmp_path / "train.yaml"
    cfg.write_text(yaml.safe_dump(TRAIN_YAML))
    res = CliRunner().invoke(main, ["bench", str(cfg), "--units", str(corpus.units)])
    assert res.exit_code != 0 and "--data" in res.output
