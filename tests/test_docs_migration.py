"""docs/migration.md's first run on a CPU-only machine, as a user runs it: its ```shell
blocks, in page order, as one bash script, in a copy of this clone (the files git tracks
and the untracked ones it does not ignore), from a fresh virtual environment that the
page's own lines make and install into. No ``PYTHONPATH`` of ours: ``wenet-lhotse`` and
``python -m wenet_lhotse...`` are what the page's ``pip install -e`` installed.

Three lines are adapted, each for a reason outside the page's control:

* ``python -m venv .venv`` gets ``--system-site-packages``: torch, Lhotse and WeNet's
  dependencies come from this interpreter's site packages instead of a download
  (minutes, and no network in CI); the venv is still fresh, and the package is
  installed into it from the clone. torch's ``torchrun`` script is written into the venv's
  ``bin/`` as pip would have written it (the site packages' own ``torchrun`` runs the
  outer interpreter, which may import another wenet-lhotse);
* the ``pip install torch...`` line is left out (torch is in those site packages), and
  ``pip install -e ...`` gets ``--no-index --no-build-isolation`` (no index to ask; the
  build backend comes from the site packages: the venv's own old setuptools, which
  ``venv`` puts there, is uninstalled first, as pip's build isolation would fetch the
  ``setuptools>=77`` that ``pyproject.toml`` asks for);
* ``git clone ... ../wenet`` becomes a link to ``$WENET_ROOT`` (WeNet's pinned snapshot).

The run is also the short real run of WeNet's ``train.py`` through the drop-in on which
the progress line (:mod:`wenet_lhotse.loader.progress`), the ``final.pt`` repair and
``wenet-lhotse plot`` are checked.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "migration.md"
#: the drop-in's training module as the page names it (one place, if it moves)
TRAIN_MODULE = "wenet_lhotse.dropin.train"
SHELL = re.compile(r"```shell\n(.*?)```", re.S)


def first_run_script(page: Path = PAGE) -> str:
    """The page's ```shell blocks as one script, adapted as the module docstring says."""
    lines = []
    for block in SHELL.findall(page.read_text(encoding="utf-8")):
        for line in block.splitlines():
            cmd = line.split("  #")[0].rstrip()
            if cmd.startswith("python -m venv "):
                cmd = cmd.replace("python -m venv ", f"{sys.executable} -m venv "
                                  "--system-site-packages ", 1)
                # torch's console script, as pip would write it into the venv
                cmd += ("\nprintf '#!/bin/sh\\nexec \"%s\" -m torch.distributed.run "
                        "\"$@\"\\n' \"$VIRTUAL_ENV/bin/python\" > \"$VIRTUAL_ENV/bin/torchrun\""
                        "\nchmod +x \"$VIRTUAL_ENV/bin/torchrun\"")
            elif cmd.startswith("pip install torch"):
                continue
            elif cmd.startswith("pip install -e "):
                cmd = "pip uninstall -q -y setuptools && " + cmd.replace(
                    "pip install -e ", "pip install -q --no-index --no-build-isolation -e ", 1)
            elif cmd.startswith("git clone ") and cmd.endswith(" ../wenet"):
                cmd = 'ln -s "$WENET_ROOT" ../wenet'
            lines.append(cmd)
    return "set -e\n" + "\n".join(lines) + "\n"


def _copy_clone(dst: Path) -> None:
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT,
                           capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, files):
        src = ROOT / name
        if src.is_file():
            (dst / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / name)


def test_the_page_shows_what_the_test_runs():
    script = first_run_script()
    for must in ("--system-site-packages", 'pip install -q --no-index --no-build-isolation -e ".[',
                 'ln -s "$WENET_ROOT" ../wenet', "mkdir -p exp/first", "--device cpu",
                 f"-m {TRAIN_MODULE}", "--checkpoint exp/first/epoch_0.pt",
                 "tools/compute-wer.py", "wenet-lhotse plot exp/first"):
        assert must in script, must


@pytest.mark.slow
def test_first_run_as_written_from_a_fresh_venv(tmp_path, wenet_root):
    clone = tmp_path / "wenet-lhotse"
    clone.mkdir()
    _copy_clone(clone)
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env.update(WENET_ROOT=str(wenet_root), OMP_NUM_THREADS="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    res = subprocess.run(["bash", "-c", first_run_script()], cwd=clone, env=env,
                         capture_output=True, text=True, timeout=900)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-6000:]
    run = clone / "first_run"
    exp = run / "exp" / "first"
    # the package the page used is the clone's, installed into the fresh venv
    where = subprocess.run([str(clone / ".venv" / "bin" / "python"), "-c",
                            "import wenet_lhotse; print(wenet_lhotse.__file__)"], env=env,
                           cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert where.stdout.strip().startswith(str(clone / "wenet_lhotse")), where
    assert (clone / ".venv" / "bin" / "wenet-lhotse").is_file()
    # the last checkpoint by its real name, and final.pt repointed at it
    assert (exp / "epoch_0.pt").is_file()
    assert os.readlink(exp / "final.pt") == "epoch_0.pt" and (exp / "final.pt").exists()
    log = (exp / "train.log").read_text(encoding="utf-8")
    assert "final.pt now links to epoch_0.pt" in log
    # the progress line, rank 0 only, after the first batch (map mode: an estimate)
    progress = re.findall(r"epoch 0: batch \d+/~?\d+ \(\d+%\), \d+ utts, [\d.]+ h audio, "
                          r"data wait \d+% of [\w ]+, ETA [\w ]+", log)
    assert progress and progress[0].startswith("epoch 0: batch 1/"), log[-3000:]
    # our own warnings are gone from a CPU run (WeNet's are explained in troubleshooting)
    assert "ResourceWarning" not in log and "Traceback" not in log
    # the launcher's stand-ins, without the test harness' on any path: one line per rank
    # (this run is also test_wenet_launch's two ranks training without them)
    stood = [line for line in log.splitlines() if "stood in for" in line]
    assert len(stood) == 2, log[-3000:]
    for name in ("deepspeed", "torchaudio"):
        if importlib.util.find_spec(name) is None:
            assert f"{name} (not installed)" in stood[0], stood
    assert "Overall ->" in (exp / "test" / "wer").read_text(encoding="utf-8")
    png = exp / "train.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    assert f"wrote {png.relative_to(run)}" in out


def test_plot_reads_the_runs_event_file_without_tensorflow(tmp_path):
    """tensorboardX writes, dropin.plot reads back (TFRecord + Event protobuf)."""
    pytest.importorskip("tensorboardX")
    from tensorboardX import SummaryWriter

    from wenet_lhotse.dropin.plot import read_run

    exp = tmp_path / "exp"
    writer = SummaryWriter(str(exp))
    for step in range(5):
        writer.add_scalar("train/train_loss", 10.0 - step, step)
        writer.add_scalar("train/lr_0", 0.001 * step, step)
    writer.add_scalar("epoch/loss", 7.5, 0)
    writer.close()
    (exp / "train.log").write_text(
        "2026 INFO Epoch 0 Step 5 CV info lr 1e-3 cv_loss 7.5 rank 0 acc 0.1\n"
        "2026 INFO epoch 0: batch 4/~8 (50%), 32 utts, 0.01 h audio, data wait 12% of "
        "1 min 4 s, ETA 1 min 4 s\n", encoding="utf-8")
    curves = read_run(exp)
    assert curves.train_loss == [(float(s), 10.0 - s) for s in range(5)]
    assert [round(y, 6) for _, y in curves.lr] == [0.0, 0.001, 0.002, 0.003, 0.004]
    assert curves.cv_loss_epoch == [(0.0, 7.5)] and curves.cv_loss_step == [(5.0, 7.5)]
    assert curves.data_wait == [(4, 12.0)] and curves.throughput == [(4, 0.5)]
