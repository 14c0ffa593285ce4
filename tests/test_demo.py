"""The README's first command, at reduced size: corpus -> import -> train (1 process and
2 DDP ranks via torchrun/gloo) -> plot."""

from __future__ import annotations

import json

import pytest


@pytest.mark.slow
def test_demo_quick_end_to_end(demo_quick):
    # `wenet-lhotse demo --quick -o DIR`, run once per session (conftest.py: the docs pages
    # that show the command reuse the run)
    res, out = demo_quick
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


@pytest.mark.parametrize("feats", [{"feats_type": "mfcc", "mfcc_conf": {"num_ceps": 13}},
                                   {}])  # {}: WeNet's default fbank, 23 bins
def test_trainer_follows_the_yamls_feature_dimension(tmp_path, corpus, feats):
    from wenet_lhotse.demo.train import train

    configs = {"dataset_conf": {**feats, "batch_conf": {"batch_type": "static",
                                                        "batch_size": 8}},
               "tokenizer_conf": {"symbol_table_path": str(corpus.units)},
               "model_conf": {"hidden": 16, "num_layers": 1}}
    hist = train(configs, str(corpus.data_list), None, tmp_path / "exp", num_workers=0,
                 max_epoch=1)
    assert len(hist) == 1 and hist[0].train_loss > 0 and hist[0].batches > 0
    assert configs["vocab_size"] == len(corpus.units.read_text().splitlines())
