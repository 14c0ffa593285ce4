"""Progress bars only on a terminal (``cli.main.show_progress``): a command whose stderr
is a pipe or a log file prints no bar (each redraw would be one more line there); the
same command on a terminal draws one."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _cmd(corpus):
    return [sys.executable, "-m", "wenet_lhotse", "validate", str(corpus.data_list)]


def test_no_progress_bar_when_stderr_is_not_a_terminal(corpus, tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    with open(tmp_path / "log", "w") as log:
        res = subprocess.run(_cmd(corpus), env=env, stdout=subprocess.PIPE, stderr=log,
                             text=True)
    assert res.returncode == 0
    err = (tmp_path / "log").read_text()
    assert "validate:" not in err and "utt/s" not in err and "\r" not in err, err


def test_progress_bar_on_a_terminal(corpus):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    leader, follower = pty.openpty()
    # a terminal 80 columns wide (a new pty has 0: tqdm would draw an empty bar)
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    try:
        proc = subprocess.Popen(_cmd(corpus), env=env, stdout=subprocess.PIPE,
                                stderr=follower)
        os.close(follower)
        seen = b""
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # the terminal's other end closed: the command ended
                break
            if not chunk:
                break
            seen += chunk
        assert proc.wait(120) == 0
    finally:
        os.close(leader)
    assert b"validate:" in seen and b"utt" in seen, seen[-2000:]
