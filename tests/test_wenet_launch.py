"""The launcher (``python -m wenet_lhotse.dropin.train`` / ``wenet_recognize``) runs WeNet's
unmodified scripts with neither torchaudio nor deepspeed installed and WITHOUT the test
harness' stand-ins on ``PYTHONPATH`` (only this repo and ``$WENET_ROOT``), as on a user's
fresh machine; missing modules, config and data errors are one line, also per rank under
torchrun. In-process tests of :mod:`wenet_lhotse.dropin.shims` first."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import typing
from pathlib import Path

import pytest

from wenet_lhotse.dropin.shims import MissingDependency, missing_packages, stand_ins

REPO = Path(__file__).resolve().parents[1]


# -- the stand-ins, in process --

def test_stand_ins_only_while_inside_and_every_call_refuses_in_one_line():
    if importlib.util.find_spec("torchaudio") is not None:
        pytest.skip("torchaudio is installed here: no stand-in is made")
    with stand_ins() as installed:
        assert "torchaudio (not installed)" in installed
        import torchaudio
        import torchaudio.compliance.kaldi as kaldi
        from torchaudio.compliance.kaldi import Tuple

        assert Tuple is typing.Tuple  # wenet/models/paraformer/cif.py imports it there
    assert "torchaudio" not in sys.modules and importlib.util.find_spec("torchaudio") is None
    with pytest.raises(MissingDependency) as info:
        kaldi.fbank(None, num_mel_bins=80)
    msg = str(info.value)
    assert "\n" not in msg
    assert msg.startswith("torchaudio.compliance.kaldi.fbank was called, but torchaudio is "
                          "not installed") and "pip install torchaudio" in msg
    with pytest.raises(MissingDependency, match="torchaudio.load was called"):
        torchaudio.load("x.wav")


def test_deepspeed_stand_in_adds_deepspeeds_arguments_and_refuses_the_rest():
    import argparse

    if importlib.util.find_spec("deepspeed") is not None:
        pytest.skip("deepspeed is installed here: no stand-in is made")
    with stand_ins():
        import deepspeed
        from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs_all_live
    args = deepspeed.add_config_arguments(argparse.ArgumentParser()).parse_args([])
    assert (args.deepspeed, args.deepspeed_config) == (False, None)
    with pytest.raises(MissingDependency, match=r"deepspeed.init_distributed was called, but "
                       r"deepspeed is not installed .*: use --train_engine torch_ddp, or "
                       r"pip install deepspeed"):
        deepspeed.init_distributed(dist_backend="gloo")
    with pytest.raises(MissingDependency, match="estimate_zero3"):
        estimate_zero3_model_states_mem_needs_all_live(None)


def test_real_packages_win(tmp_path, monkeypatch):
    """A package that is installed (found by find_spec) is never stood in."""
    (tmp_path / "deepspeed").mkdir()
    (tmp_path / "deepspeed" / "__init__.py").write_text("REAL = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    assert "deepspeed" not in missing_packages()
    with stand_ins() as installed:
        assert not any(x.startswith("deepspeed") for x in installed)
        import deepspeed
        assert deepspeed.REAL
    sys.modules.pop("deepspeed", None)


# -- WeNet's scripts in subprocesses, no stand-in on PYTHONPATH --

def _env(wenet_root, **extra):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), str(wenet_root)]),
               OMP_NUM_THREADS="1", WENET_ROOT=str(wenet_root))
    env.update(extra)
    return env


def _run(cmd, env, cwd, timeout=600):
    return subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


def _our_lines(stderr):
    """stderr without WeNet's and torch's own log lines (timestamped) and torchrun's
    failure summary: what the ranks printed."""
    return [line for line in stderr.splitlines() if line.startswith("error:")]


def test_help_and_missing_module_without_stand_ins_on_the_path(wenet_root, tmp_path):
    res = _run([sys.executable, "-m", "wenet_lhotse.dropin.train", "--help"],
               _env(wenet_root), tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "--train_engine" in res.stdout and "--deepspeed_config" in res.stdout
    # a module WeNet needs is missing: the real cause, in one line
    code = ("import sys; sys.modules['librosa'] = None\n"
            "from wenet_lhotse.dropin.recognize import main; main(['--help'])")
    res = _run([sys.executable, "-c", code], _env(wenet_root), tmp_path)
    assert res.returncode == 1
    assert res.stderr.strip().splitlines() == [
        "error: WeNet (wenet/dataset/processor.py:23) needs 'librosa', which is not "
        "installed: pip install librosa (or, in the wenet-lhotse clone, pip install -e "
        "\".[wenet]\" for all of WeNet's dependencies)"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, wenet_root):
    """24 utterances, a tiny conformer yaml (1 epoch) and one with a typo."""
    from wenet_harness.runs import speaker_table, write_config
    from wenet_lhotse.corpus import generate_corpus

    root = tmp_path_factory.mktemp("launch")
    corpus = generate_corpus(root / "corpus", num_utterances=24, min_duration=0.8,
                             max_duration=1.5, shard_size=12, seed=3)
    spk = speaker_table(corpus.data_list, root / "spk.txt")
    ok = write_config(root / "ok.yaml", corpus.units, spk, max_epoch=1)
    typo = write_config(root / "typo.yaml", corpus.units, spk, {"shufle": True}, max_epoch=1)
    return root, corpus, ok, typo


def _train_args(config, data_list, model_dir, *extra):
    return ["--config", str(config), "--data_type", "raw", "--train_data", str(data_list),
            "--cv_data", str(data_list), "--model_dir", str(model_dir), "--device", "cpu",
            "--ddp.dist_backend", "gloo", "--num_workers", "1", *extra]


def _torchrun(nproc):
    from wenet_harness.runs import free_port

    return [sys.executable, "-m", "torch.distributed.run", "--nnodes=1",
            f"--nproc_per_node={nproc}", "--rdzv-backend=c10d",
            f"--rdzv-endpoint=127.0.0.1:{free_port()}", "-m", "wenet_lhotse.dropin.train"]


@pytest.mark.slow
def test_torchrun_two_ranks_a_typo_is_one_line_per_rank(wenet_root, tiny):
    # (the two ranks that train without the harness' stand-ins, one "stood in for" line
    # per rank: tests/test_docs_migration.py's first run, the same launch from a fresh venv)
    root, corpus, ok, typo = tiny
    res = _run([*_torchrun(2), *_train_args(typo, corpus.data_list, root / "typo")],
               _env(wenet_root), root)
    assert res.returncode != 0
    assert sorted(_our_lines(res.stderr)) == [
        f"error: rank {r}: dataset_conf.shufle: unknown key; did you mean shuffle?"
        for r in (0, 1)]
    # no traceback of ours or WeNet's (torchrun's own summary names the failed ranks)
    assert "wenet_lhotse/" not in res.stderr and "wenet/bin/train.py" not in res.stderr


def _single(wenet_root, **extra):
    from wenet_harness.runs import free_port

    return _env(wenet_root, RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1",
                MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), **extra)


def test_missing_data_and_deepspeed_engine_are_one_line(wenet_root, tiny):
    root, corpus, ok, _ = tiny
    (root / "exp1").mkdir(exist_ok=True)
    cmd = [sys.executable, "-m", "wenet_lhotse.dropin.train"]
    res = _run([*cmd, *_train_args(ok, root / "nope.list", root / "exp1")],
               _single(wenet_root), root)
    assert res.returncode == 1
    lines = _our_lines(res.stderr)
    assert len(lines) == 1 and "nope.list" in lines[0], res.stderr[-3000:]
    assert "Traceback" not in res.stderr
    if importlib.util.find_spec("deepspeed") is not None:
        return
    (root / "ds.json").write_text("{}")
    res = _run([*cmd, *_train_args(ok, corpus.data_list, root / "exp1", "--train_engine",
                                   "deepspeed", "--deepspeed_config", str(root / "ds.json"))],
               _single(wenet_root), root)
    assert res.returncode == 1
    assert _our_lines(res.stderr) == [
        "error: deepspeed.init_distributed was called, but deepspeed is not installed "
        "(wenet-lhotse only stood it in for WeNet's imports): use --train_engine torch_ddp, "
        "or pip install deepspeed"], res.stderr[-3000:]
    assert "Traceback" not in res.stderr


def test_a_package_that_does_not_load_is_named(tmp_path, monkeypatch):
    """An installed binary package that fails to load (torchaudio built for another torch
    raises OSError: undefined symbol) is named in the one line, with what to do."""
    from wenet_lhotse.dropin.launch import import_wenet_module

    pkg = tmp_path / "site-packages" / "brokenaudio"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise OSError('libbrokenaudio.so: undefined symbol: x')\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site-packages"))
    with pytest.raises(ImportError) as info:
        import_wenet_module("brokenaudio")
    assert str(info.value) == (
        "WeNet does not import: OSError: libbrokenaudio.so: undefined symbol: x (the "
        "installed brokenaudio does not load: reinstall it for this torch, or uninstall it)")
    sys.modules.pop("brokenaudio", None)
    monkeypatch.setitem(sys.modules, "wenet", None)  # no WeNet at all
    with pytest.raises(ImportError, match=r"^WeNet is not importable \(No module named "
                       r"'wenet.bin'; 'wenet' is not a package\): put a WeNet checkout"):
        import_wenet_module("wenet.bin.train")


@pytest.mark.slow
def test_first_hour_mistakes_are_one_line_naming_the_fix(wenet_root, tiny):
    """Mistakes of a WeNet user's first hour (issue 32), each one line per rank under
    torchrun, before any training: deepspeed without its config; shards for training
    and a raw cv list under one --data_type; and (one process) a missing symbol table
    named by its yaml key."""
    import yaml

    root, corpus, ok, _ = tiny
    res = _run([*_torchrun(2), *_train_args(ok, corpus.data_list, root / "exp_ds",
                                            "--train_engine", "deepspeed")],
               _env(wenet_root), root)
    assert res.returncode != 0
    assert sorted(_our_lines(res.stderr)) == [
        f"error: rank {r}: --train_engine deepspeed needs --deepspeed_config FILE "
        "(DeepSpeed's json, which WeNet asserts is given); or train with --train_engine "
        "torch_ddp" for r in (0, 1)], res.stderr[-3000:]
    # (torchrun prints its own ChildFailedError traceback; none of ours or WeNet's)
    assert "AssertionError" not in res.stderr and "wenet_lhotse/" not in res.stderr
    (root / "exp_dt").mkdir(exist_ok=True)
    args = _train_args(ok, corpus.shards_list, root / "exp_dt")
    args[args.index("--data_type") + 1] = "shard"
    args[args.index("--cv_data") + 1] = str(corpus.data_list)
    res = _run([*_torchrun(2), *args], _env(wenet_root), root)
    assert res.returncode != 0
    lines = sorted(_our_lines(res.stderr))
    assert [line.split(":", 1)[0] for line in lines] == ["error", "error"], res.stderr[-3000:]
    for r, line in enumerate(lines):
        assert line.startswith(f"error: rank {r}: {corpus.data_list}:1: --cv_data has a raw "
                               "data.list line (JSON), but --data_type is shard: this list "
                               "fits --data_type raw"), line
        assert f"lhotse_conf.cv_sources: [{{path: {corpus.data_list}, type: raw}}]" in line
    assert "wenet_lhotse/" not in res.stderr and "wenet/bin/train.py" not in res.stderr
    assert not (root / "exp_dt" / "init.pt").exists()
    conf = yaml.safe_load(ok.read_text())
    conf["tokenizer_conf"]["symbol_table_path"] = "data/no_units.txt"
    bad = root / "no_units.yaml"
    bad.write_text(yaml.safe_dump(conf))
    (root / "exp_u").mkdir(exist_ok=True)
    res = _run([sys.executable, "-m", "wenet_lhotse.dropin.train",
                *_train_args(bad, corpus.data_list, root / "exp_u")], _single(wenet_root), root)
    assert res.returncode == 1
    assert _our_lines(res.stderr) == [
        "error: No such file or directory: data/no_units.txt "
        f"(tokenizer_conf.symbol_table_path in {bad})"], res.stderr[-3000:]
