"""An adversarial corpus for the hardening tests, built on the fly: tars with sparse,
link and device members, forged sizes, unsafe names; raw lines with NaN times and
lone surrogates. Plain helpers (no fixtures), imported by ``tests/test_hardening_*``."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Iterable, List, Sequence, Tuple

import numpy as np
import soundfile as sf

REPO = Path(__file__).resolve().parent.parent


def wav_bytes(seed: int = 0, n: int = 1600, sr: int = 16000) -> bytes:
    buf = io.BytesIO()
    pcm = np.random.default_rng(seed).integers(-3000, 3000, n, dtype=np.int16)
    sf.write(buf, pcm, sr, format="WAV", subtype="PCM_16")
    return buf.getvalue()


def utt(key: str, seed: int = 0) -> List[Tuple[str, bytes]]:
    """The two members of one WeNet utterance: ``key.txt`` then ``key.wav``."""
    return [(f"{key}.txt", f"text of {key}".encode()), (f"{key}.wav", wav_bytes(seed))]


def add_regular(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def add_sparse(tar: tarfile.TarFile, name: str, claim: int) -> None:
    """A PAX ``GNU.sparse`` 1.0 member of ``claim`` bytes that stores one byte: every
    other byte is a hole, which ``tarfile`` materializes as zeros when read."""
    smap = f"1\n{claim - 1}\n1\n".encode()
    data = smap.ljust(512, b"\0") + b"x".ljust(512, b"\0")
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.pax_headers = {"GNU.sparse.major": "1", "GNU.sparse.minor": "0",
                        "GNU.sparse.name": name, "GNU.sparse.realsize": str(claim)}
    tar.addfile(info, io.BytesIO(data))


def add_special(tar: tarfile.TarFile, name: str, kind: bytes, linkname: str = "") -> None:
    """A member of ``kind`` (``tarfile.SYMTYPE``, ``LNKTYPE``, ``CHRTYPE``, ``BLKTYPE``,
    ``FIFOTYPE``) with no data."""
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = linkname
    if kind in (tarfile.CHRTYPE, tarfile.BLKTYPE):
        info.devmajor, info.devminor = 1, 3  # /dev/null
    tar.addfile(info)


def forged_size_tar(name: str, claim: int, prefix: Sequence[Tuple[str, bytes]] = ()) -> bytes:
    """A ~40 KB tar whose last member's header claims ``claim`` bytes it does not hold."""
    buf = io.BytesIO()
    tar = tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT)
    for n, d in prefix:
        add_regular(tar, n, d)
    body = buf.getvalue()  # not closed: no end-of-archive blocks yet
    info = tarfile.TarInfo(name)
    info.size = claim
    return body + info.tobuf(format=tarfile.GNU_FORMAT) + b"\0" * 40000


def tar_of(members: Iterable, fmt=tarfile.PAX_FORMAT) -> bytes:
    """A tar from ``(name, bytes)`` pairs and ``callable(tar)`` entries (special members)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as tar:
        for m in members:
            if callable(m):
                m(tar)
            else:
                add_regular(tar, *m)
    return buf.getvalue()


def write_shard_list(root: Path, tars: Sequence[bytes], name: str = "shards.list") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, data in enumerate(tars):
        p = root / f"shard{i}.tar"
        p.write_bytes(data)
        paths.append(str(p))
    lst = root / name
    lst.write_text("".join(p + "\n" for p in paths))
    return lst


def raw_line(**obj) -> str:
    """A raw-list line; ``allow_nan`` so that NaN/Infinity can be written as JSON does."""
    return json.dumps(obj, ensure_ascii=True, allow_nan=True)


def cli(*args, env=None, check=None, timeout=300, **kw) -> subprocess.CompletedProcess:
    """``wenet-lhotse ARGS`` as a real subprocess (this worktree's package): forked from the
    session's CLI server (tests/cli_server.py, the imports paid once); ``python -m
    wenet_lhotse`` in a fresh interpreter when ``env`` or ``kw`` (``preexec_fn``: limits
    for the command's own process) ask for more than the server can give. ``timeout``
    (s) is a quiet machine's hang guard, stretched by :func:`under_load`."""
    full_env = dict(os.environ, PYTHONPATH=str(REPO))
    full_env.update(env or {})
    if env or kw:
        cmd = [sys.executable, "-m", "wenet_lhotse"]
    else:
        from cli_server import wenet_lhotse_cmd

        cmd = wenet_lhotse_cmd()
    res = subprocess.run([*cmd, *map(str, args)],
                         capture_output=True, text=True, env=full_env,
                         timeout=under_load(timeout), **kw)
    if check is not None:
        assert res.returncode == check, res.stdout + res.stderr
    return res


def children_of(pid: int) -> List[int]:
    """PIDs of the live child processes of ``pid`` (from /proc)."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid and fields[0] != "Z":
            out.append(int(d.name))
    return out


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


#: the most a quiet machine's bound is stretched (8 busy processes on 2 cores: about 5)
MAX_LOAD_FACTOR = 6.0


def load_factor() -> float:
    """How much slower than on a quiet machine this machine runs now: the 1-minute load
    average per CPU this process may use, at least 1 (issue 30: the suite runs on 2
    cores with 8 busy processes beside it, a factor of about 5), at most
    :data:`MAX_LOAD_FACTOR`: a bound stretched further would no longer tell a hang apart."""
    return min(MAX_LOAD_FACTOR,
               max(1.0, os.getloadavg()[0] / len(os.sched_getaffinity(0))))


def under_load(seconds: float) -> float:
    """A wall-clock bound of ``seconds`` on a quiet machine, stretched by
    :func:`load_factor`: a process that needs its share of a CPU to end (interpreter
    teardown, a bounded join) gets it later on a loaded machine. What the bound tells
    apart (a mechanism vs a grace window, a prompt end vs a hang) is checked at its
    stated size where the machine is quiet, and a hang still fails under load."""
    return seconds * load_factor()


def wait_until(pred, timeout: float, what: str, step: float = 0.1):
    """Poll ``pred`` until truthy (returns its value); fail the test after ``timeout`` s
    (:func:`under_load`: a hang guard, stretched on a loaded machine)."""
    timeout = under_load(timeout)
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        val = pred()
        if val:
            return val
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def kill(pid: int, sig=signal.SIGKILL) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass
