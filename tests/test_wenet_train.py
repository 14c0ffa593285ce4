"""WeNet's own ``train.py`` (from ``$WENET_ROOT``, unmodified) on our loader, next to the
same ``train.py`` on WeNet's own loader: same corpus, same yaml, same arguments.

Each run trains a tiny conformer for 2 epochs on CPU to the saved checkpoint; the steps
WeNet's executor records in each checkpoint's yaml must be the same on both loaders
(static batches), and every run WeNet completes must complete on ours.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from wenet_harness.runs import (
    run_train,
    saved_steps,
    speaker_table,
    units_special_tokens,
    write_config,
)
from wenet_lhotse.corpus import generate_corpus

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def data(tmp_path_factory, wenet_root):
    """96 utterances of 0.8-2 s (4 speakers), as a raw list and as 4 WeNet shards."""
    root = tmp_path_factory.mktemp("wenet_train")
    corpus = generate_corpus(root / "corpus", num_utterances=96, min_duration=0.8,
                             max_duration=2.0, shard_size=24, seed=5)
    spk = speaker_table(corpus.data_list, root / "spk.txt")
    return root, corpus, spk


def _ok(res: subprocess.CompletedProcess, what: str) -> None:
    assert res.returncode == 0, f"{what} failed:\n{res.stdout[-4000:]}"


def _both(data, name, how, *, nproc=1, data_type="raw", dataset_conf=None, **top):
    """Train with WeNet's loader and with ours (``how``); return both step tables."""
    root, corpus, spk = data
    conf = write_config(root / f"{name}.yaml", corpus.units, spk, dataset_conf, **top)
    train = corpus.shards_list if data_type == "shard" else corpus.data_list
    steps = {}
    for who in ("wenet", how):
        model_dir = root / f"{name}_{who}"
        res = run_train(who, conf, [train], train, model_dir, data_type=data_type,
                        nproc=nproc)
        _ok(res, f"{who} ({name})")
        # (WeNet's final.pt links to "1.pt", not "epoch_1.pt": check the epoch's file)
        assert (model_dir / "epoch_0.pt").exists() or any(model_dir.glob("step_*.pt"))
        steps[who] = saved_steps(model_dir)
    return steps["wenet"], steps[how], root / f"{name}_{how}"


def test_one_import_swap_single_process(data):
    wenet, ours, model_dir = _both(data, "swap1", "swap")
    assert sorted(wenet) == ["epoch_0", "epoch_1"] == sorted(ours)
    assert (model_dir / "epoch_1.pt").exists()
    assert ours == wenet  # optimizer steps per epoch, static batches


def test_step_mode_repeats_the_data_as_wenet_does(data):
    # save_interval in the yaml: WeNet sets dataset_conf.cycle = max_epoch and trains one
    # "epoch" over the repeated data, with a cv + checkpoint every save_interval steps.
    wenet, ours, _ = _both(data, "steps", "module", save_interval=5)
    assert "epoch_0" in wenet and len(wenet) > 2
    assert ours == wenet


@pytest.mark.slow
@pytest.mark.parametrize("data_type", ["raw", "shard"])
def test_torchrun_two_gloo_ranks(data, data_type):
    wenet, ours, model_dir = _both(data, f"ddp_{data_type}", "module", nproc=2,
                                   data_type=data_type)
    assert sorted(wenet) == ["epoch_0", "epoch_1"] == sorted(ours)
    assert ours == wenet


def test_train_data_takes_several_lists(data, tmp_path):
    """``--train_data a.list b.list`` (WeNet's ``nargs='+'``) reads both lists."""
    from types import SimpleNamespace

    from wenet_harness import import_wenet
    from wenet_lhotse.dropin.compat import init_dataset_and_dataloader

    _, corpus, _ = data
    lines = corpus.data_list.read_text(encoding="utf-8").splitlines(keepends=True)
    a, b = tmp_path / "a.list", tmp_path / "b.list"
    a.write_text("".join(lines[:40]), encoding="utf-8")
    b.write_text("".join(lines[40:]), encoding="utf-8")
    (init_tokenizer_mod,) = import_wenet("wenet.utils.init_tokenizer")
    configs = {"tokenizer": "char", "tokenizer_conf": {
        "symbol_table_path": str(corpus.units), "non_lang_syms_path": None,
        "special_tokens": units_special_tokens(corpus.units)},
        "dataset_conf": {"fbank_conf": {"num_mel_bins": 20},
                         "batch_conf": {"batch_type": "static", "batch_size": 8}}}
    tok = init_tokenizer_mod.init_tokenizer(configs)
    args = SimpleNamespace(train_data=[str(a), str(b)], cv_data=str(b), data_type="raw",
                           num_workers=0, pin_memory=False, prefetch=2)
    _, _, train_dl, cv_dl = init_dataset_and_dataloader(args, configs, tok)
    assert sorted(k for batch in train_dl for k in batch["keys"]) == sorted(corpus.keys)
    assert len([k for batch in cv_dl for k in batch["keys"]]) == len(lines) - 40


def test_runner_without_wenet_says_how_to_fix(tmp_path):
    env = dict(os.environ, PYTHONPATH=ROOT)
    res = subprocess.run([sys.executable, "-m", "wenet_lhotse.dropin.train", "--config", "x"],
                         env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert res.returncode != 0 and "WeNet is not importable" in res.stderr


def test_recognize_py_decodes_a_checkpoint_trained_here(data):
    """WeNet's recognize.py, through ``python -m wenet_lhotse.dropin.recognize``, on the
    checkpoint WeNet's train.py saved under our loader: the same hypotheses, utterance by
    utterance, as recognize.py with WeNet's own reading (dither 0, same model)."""
    from wenet_harness.runs import read_results, run_recognize

    root, corpus, _ = data
    model_dir = root / "swap1_swap"  # trained by test_one_import_swap_single_process
    if not (model_dir / "epoch_1.pt").exists():
        _both(data, "swap1", "swap")
    results = {}
    for how in ("wenet", "module"):
        out = root / f"recognize_{how}"
        res = run_recognize(how, model_dir / "train.yaml", corpus.data_list,
                            model_dir / "epoch_1.pt", out, batch_size=4)
        _ok(res, f"recognize.py ({how})")
        results[how] = {m: read_results(out, m) for m in ("ctc_greedy_search", "attention")}
    for mode in ("ctc_greedy_search", "attention"):
        assert sorted(results["module"][mode]) == sorted(corpus.keys)
        assert results["module"][mode] == results["wenet"][mode], mode
    # batches of 4 consecutive lines, as WeNet's (each sorted longest first)
    for how in ("module", "wenet"):
        keys = list(results[how]["ctc_greedy_search"])
        assert [sorted(keys[i:i + 4]) for i in range(0, len(keys), 4)] == \
            [sorted(corpus.keys[i:i + 4]) for i in range(0, len(keys), 4)], how
