"""A WeNet user's first hour (issue 32), in process: the progress line, the log line when
``lhotse_conf.sources`` replaces ``--train_data``, the ``--data_type`` a list's first line
fits, ``plot`` without matplotlib. (Under torchrun: tests/test_wenet_launch.py; the
migration page's first run: tests/test_docs_migration.py.)"""

from __future__ import annotations

import logging
import sys
from types import SimpleNamespace

import pytest
import torch

from wenet_lhotse.corpus import generate_corpus
from wenet_lhotse.errors import WenetDataError
from wenet_lhotse.loader.progress import EpochProgress
from wenet_lhotse.text.tokenizer import CharTokenizer


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return generate_corpus(tmp_path_factory.mktemp("first_hour") / "c", num_utterances=24,
                           min_duration=0.5, max_duration=1.0, shard_size=12, seed=2)


class _Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_progress_line_counts_waits_and_estimates(caplog):
    """Each batch waits 1 s in the loader and trains 3 s: data wait 25%; 12 batches of 4
    utterances planned on a map-style loader of 48 utterances: ETA from the rate."""
    clock = _Clock()

    def batches():
        for _ in range(12):
            clock.t += 1.0  # in next(): data wait
            yield {"keys": ["a"] * 4, "feats_lengths": torch.tensor([100] * 4)}

    mux = SimpleNamespace(streams=[SimpleNamespace(reader=[0] * 48)])
    loader = SimpleNamespace(sampler=SimpleNamespace(mux=mux), mode="map", epoch=3,
                             partitioned=True)
    progress = EpochProgress(loader, every=6, clock=clock)
    with caplog.at_level(logging.INFO, logger="wenet_lhotse.loader.progress"):
        for _ in progress.wrap(batches()):
            clock.t += 3.0  # the training step
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "epoch 3: batch 1/~12 (8%), 4 utts, 0.00 h audio, data wait 100% of 1 s, ETA 11 s",
        "epoch 3: batch 6/~12 (50%), 24 utts, 0.01 h audio, data wait 29% of 21 s, "
        "ETA 21 s",
        "epoch 3: batch 12/~12 (100%), 48 utts, 0.01 h audio, data wait 27% of 45 s, "
        "ETA 0 s"]
    assert progress.audio_s == pytest.approx(48.0)  # 48 x 100 frames x 10 ms


def test_progress_on_a_real_loader_map_and_streamed(corpus, caplog):
    from wenet_lhotse import build_dataloader

    conf = {"fbank_conf": {"num_mel_bins": 20},
            "batch_conf": {"batch_type": "static", "batch_size": 4},
            "lhotse_conf": {"progress_every": 3}}
    with caplog.at_level(logging.INFO, logger="wenet_lhotse.loader.progress"):
        for data in (corpus.data_list, corpus.shards_list):
            _, loader = build_dataloader(str(data), CharTokenizer(corpus.units), conf,
                                         "train", num_workers=0)
            assert sum(1 for _ in loader) == 6
            _, cv = build_dataloader(str(data), CharTokenizer(corpus.units), conf, "cv",
                                     num_workers=0)
            list(cv)  # cv: no progress lines
    lines = [r.getMessage() for r in caplog.records if r.name.endswith(".progress")]
    assert [line.split(",")[0] for line in lines] == [
        "epoch 0: batch 1/~6 (16%)", "epoch 0: batch 3/~6 (50%)", "epoch 0: batch 6/~6 (100%)",
        "epoch 0: batch 1 (streamed: the epoch's length is known at its end)",
        "epoch 0: batch 3 (streamed: the epoch's length is known at its end)",
        "epoch 0: batch 6 (streamed: the epoch's length is known at its end)"]
    assert "ETA" in lines[0] and "ETA" not in lines[3]
    assert all(", 24 utts," in line for line in (lines[2], lines[5]))


def test_sources_replacing_train_data_is_logged(corpus, caplog):
    from wenet_lhotse.dropin.compat import init_dataset_and_dataloader

    configs = {"dataset_conf": {
        "fbank_conf": {"num_mel_bins": 20}, "batch_conf": {"batch_type": "static",
                                                          "batch_size": 8},
        "lhotse_conf": {"sources": [{"path": str(corpus.data_list), "type": "raw"}]}}}
    args = SimpleNamespace(train_data=["ignored.list"], cv_data=str(corpus.data_list),
                           data_type="raw", num_workers=0)
    with caplog.at_level(logging.INFO, logger="wenet_lhotse"):
        init_dataset_and_dataloader(args, configs, CharTokenizer(corpus.units))
    assert [r.getMessage() for r in caplog.records if "replaces" in r.getMessage()] == [
        "dataset_conf.lhotse_conf.sources replaces --train_data (ignored.list is not read): "
        f"{corpus.data_list}"]


def test_a_list_of_the_other_data_type_says_which_fits(corpus):
    from wenet_lhotse.dropin.compat import first_line_data_type, wenet_sources

    assert first_line_data_type(str(corpus.data_list)) == "raw"
    assert first_line_data_type(str(corpus.shards_list)) == "shard"
    with pytest.raises(WenetDataError) as info:
        wenet_sources(corpus.shards_list, "raw")
    msg = str(info.value)
    assert msg.startswith(f"{corpus.shards_list}:1: --train_data has a tar shard path, but "
                          "--data_type is raw: this list fits --data_type shard")
    assert "\n" not in msg and "lhotse_conf.sources: [{path:" in msg
    assert len(wenet_sources(corpus.shards_list, "shard")) == 1


def test_plot_without_matplotlib_says_what_to_install(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from wenet_lhotse.cli import main

    monkeypatch.setitem(sys.modules, "matplotlib", None)
    res = CliRunner().invoke(main, ["plot", str(tmp_path)])
    assert res.exit_code == 1
    assert res.output.strip() == ('error: plotting needs matplotlib: pip install matplotlib '
                                  '(or, in the wenet-lhotse clone: pip install -e ".[plot]")')


@pytest.mark.slow
def test_cuda_default_without_cuda_is_one_line(tmp_path, wenet_root):
    """WeNet's default ``--device cuda`` on a CPU-only machine: one line naming the flags
    (before, WeNet's 129-line ``AttributeError: ... '_cuda_setDevice'``)."""
    import os
    import subprocess

    if torch.cuda.is_available():
        pytest.skip("CUDA is available here: --device cuda is right")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    res = subprocess.run([sys.executable, "-m", "wenet_lhotse.dropin.train", "--config",
                          "x.yaml", "--train_data", "a.list", "--cv_data", "b.list"],
                         env=dict(os.environ, PYTHONPATH=os.pathsep.join(
                             [root, str(wenet_root)])), cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 1
    assert [line for line in res.stderr.splitlines() if line.startswith("error")] == [
        "error: --device cuda (WeNet default), but CUDA is not available here: on a "
        "CPU-only machine add --device cpu --ddp.dist_backend gloo"], res.stderr[-2000:]
    assert "Traceback" not in res.stderr
