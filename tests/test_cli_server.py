"""The test suite's forked ``wenet-lhotse`` (tests/cli_server.py) behaves as the console
script does for its caller: working directory, environment, stdout/stderr, exit status,
a timeout that kills the command; a caller with other ``PYTHON*`` variables gets a fresh
interpreter."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from adversarial import under_load
from cli_server import wenet_lhotse_cmd

ROOT = Path(__file__).resolve().parents[1]


def _env(**extra):
    return dict(os.environ, PYTHONPATH=str(ROOT), **extra)


def test_cwd_env_output_and_status_are_the_callers(tmp_path, corpus):
    (tmp_path / "sub").mkdir()
    res = subprocess.run([*wenet_lhotse_cmd(), "corpus", "c", "-n", "3"], cwd=tmp_path / "sub",
                         env=_env(), capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "3 utterances" in res.stdout and (tmp_path / "sub" / "c" / "data.list").exists()
    res = subprocess.run([*wenet_lhotse_cmd(), "validate", "nope.list"], cwd=tmp_path,
                         env=_env(), capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.startswith("error: ") and "nope.list" in res.stderr
    # the same as the installed console script prints (in a fresh interpreter)
    script = Path(sys.executable).parent / "wenet-lhotse"
    if not script.exists():
        pytest.skip(f"no console script at {script}")
    real = subprocess.run([str(script), "validate", "nope.list"], cwd=tmp_path, env=_env(),
                          capture_output=True, text=True, timeout=120)
    assert (real.returncode, real.stdout, real.stderr) == (res.returncode, res.stdout,
                                                           res.stderr)


def test_through_a_shell_with_a_pipe(tmp_path, cli_bin):
    env = _env(PATH=f"{cli_bin}:{os.environ['PATH']}")
    res = subprocess.run("wenet-lhotse --help | head -1; echo status=${PIPESTATUS[0]}",
                         shell=True, executable="/bin/bash", cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)
    assert res.stdout.splitlines() == ["Usage: wenet-lhotse [OPTIONS] COMMAND [ARGS]...",
                                       "status=0"], res.stdout + res.stderr


def test_other_python_variables_get_a_fresh_interpreter(tmp_path):
    # PYTHONVERBOSE is read when an interpreter starts: the server was started without it
    res = subprocess.run([*wenet_lhotse_cmd(), "--version"], cwd=tmp_path,
                         env=_env(PYTHONVERBOSE="1"), capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0 and res.stdout.startswith("wenet-lhotse, version")
    assert "import " in res.stderr  # PYTHONVERBOSE: a fresh interpreter logged its imports


def test_a_timeout_kills_the_command(tmp_path):
    """``subprocess.run(timeout=...)`` kills the client: the command goes with it."""
    with pytest.raises(subprocess.TimeoutExpired):
        subprocess.run([*wenet_lhotse_cmd(), "corpus", "big", "-n", "1000000"], cwd=tmp_path,
                       env=_env(), capture_output=True, timeout=3)
    deadline = time.monotonic() + under_load(60)  # a hang guard, stretched by the load
    while _working_in(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _working_in(tmp_path)


def _working_in(path: Path) -> list:
    """PIDs of the processes whose working directory is ``path``."""
    out = []
    for pid in os.listdir("/proc"):
        try:
            if pid.isdigit() and os.readlink(f"/proc/{pid}/cwd") == str(path):
                out.append(pid)
        except OSError:
            pass
    return out
