"""No orphan, no hang (issue 12, "Processes and time"): real processes killed by PID,
a real HTTP server on 127.0.0.1 that trickles, stalls, drops and lies."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from adversarial import REPO, alive, children_of, kill, wait_until
from lhotse import CutSet

from wenet_lhotse import ReadPolicy, SkipReport, WenetDataError, read_shard_list
from wenet_lhotse.corpus import generate_corpus


@pytest.fixture(scope="module")
def corpus8(tmp_path_factory):
    """8 utterances of ~1 s, 4 tars of 2 (about 70 KB each)."""
    return generate_corpus(tmp_path_factory.mktemp("c8"), num_utterances=8,
                           min_duration=1.0, max_duration=1.2, shard_size=2, seed=41)


def url_list(corpus, base, tmp_path, name="urls.list"):
    names = [Path(t).name for t in corpus.shards_list.read_text().split()]
    lst = tmp_path / name
    lst.write_text("".join(f"{base}/{n}\n" for n in names))
    return lst


def leftovers(*dirs):
    """Temporary files and directories our writers leave when interrupted."""
    found = []
    for d in dirs:
        d = Path(d)
        found += [p for p in d.parent.rglob("*") if p.name.endswith(".tmp")
                  or p.name.endswith(".partial")]
    return found


def start_import(lst, out, jobs=2):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.Popen(
        [sys.executable, "-m", "wenet_lhotse", "import", str(lst), "--shar", str(out),
         "-j", str(jobs)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_import_pool_ends_with_its_parent(corpus8, tmp_path, http_serve, sig):
    """`import --shar -j 2` over a trickling server, its parent killed mid-run: every pool
    worker exits (none is left to PID 1), SIGTERM also removes temporary files, and a
    rerun completes the output."""
    base = http_serve(corpus8.root / "shards", mode="trickle", interval=0.05)
    out = tmp_path / "shar"
    proc = start_import(url_list(corpus8, base, tmp_path), out)
    workers = []
    try:
        workers += wait_until(lambda: children_of(proc.pid) if len(children_of(proc.pid)) >= 2
                              else None, 120, "two pool workers")
        kill(proc.pid, sig)
        proc.wait(60)
        wait_until(lambda: not any(alive(p) for p in workers), 30,
                   f"pool workers {workers} to exit after their parent died")
    finally:
        for p in [proc.pid] + workers:  # by PID: only what this test started
            kill(p)
        proc.wait()
    if sig == signal.SIGTERM:
        assert proc.returncode != 0
        assert leftovers(out) == []
    base = http_serve(corpus8.root / "shards")
    from cli_server import wenet_lhotse_cmd  # the rerun: its own process, forked

    res = subprocess.run([*wenet_lhotse_cmd(), "import",
                          str(url_list(corpus8, base, tmp_path, "ok.list")), "--shar", str(out),
                          "-j", "2"], env=dict(os.environ, PYTHONPATH=str(REPO)),
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert sorted(c.id for c in CutSet.from_shar(in_dir=out)) == sorted(corpus8.keys)
    assert leftovers(out) == []


def test_rerun_removes_stale_temp_files_of_dead_writers(tmp_path):
    target = tmp_path / "out" / "data.list"
    code = ("import sys, time\nfrom wenet_lhotse.io.streams import atomic_output\n"
            f"with atomic_output({str(target)!r}) as f:\n"
            "    f.write(b'half'); f.flush(); print('ready', flush=True); time.sleep(600)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=str(REPO)))
    try:
        assert proc.stdout.readline().strip() == "ready"
        stale = list(target.parent.glob(".data.list.*.tmp"))
        assert len(stale) == 1
    finally:
        kill(proc.pid)
        proc.wait()
    assert stale[0].exists()  # kill -9: nothing could clean it
    # A live writer's temp file is never touched.
    live = subprocess.Popen([sys.executable, "-c", code.replace("data.list", "other.list")],
                            stdout=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=str(REPO)))
    try:
        assert live.stdout.readline().strip() == "ready"
        from wenet_lhotse.io.streams import atomic_output

        with atomic_output(target) as f:
            f.write(b"whole\n")
        assert target.read_bytes() == b"whole\n"
        assert not stale[0].exists()
        assert len(list(target.parent.glob(".other.list.*.tmp"))) == 1
    finally:
        kill(live.pid)
        live.wait()


def _read_in_thread(lst, **kw):
    """read_shard_list in a thread; (cuts or error), or None if it is still running
    after 120 s (a hang)."""
    box = {}

    def run():
        try:
            box["cuts"] = [c.id for c in read_shard_list(lst, **kw)]
        except Exception as e:  # the error is what the test looks at
            box["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(120)
    assert not t.is_alive(), "the reader hung"
    return box


def test_trickling_server_hits_the_request_deadline(corpus8, tmp_path, http_serve,
                                                    monkeypatch):
    base = http_serve(corpus8.root / "shards", mode="trickle", interval=0.5)
    lst = url_list(corpus8, base, tmp_path)
    monkeypatch.setenv("WENET_LHOTSE_HTTP_DEADLINE_S", "2")
    box = _read_in_thread(lst)
    err = box["error"]
    assert isinstance(err, WenetDataError) and err.kind == "timeout"
    assert err.source.startswith(base) and "2" in err.message and "deadline" in err.message


def test_trickling_server_hits_the_member_deadline(corpus8, tmp_path, http_serve):
    from wenet_lhotse.io.read_limits import ReadLimits

    base = http_serve(corpus8.root / "shards", mode="trickle", interval=0.2)
    lst = url_list(corpus8, base, tmp_path)
    report = SkipReport()
    box = _read_in_thread(lst, policy=ReadPolicy(
        strict=False, skip_report=report, limits=ReadLimits(member_deadline_s=1.0)))
    assert box["cuts"] == []
    assert report.counts() == {"timeout": 4}
    item = report.items[0]
    assert item.member and item.member.endswith((".wav", ".txt")) and item.source.startswith(base)


def test_stalled_server_hits_the_stall_timeout(corpus8, tmp_path, http_serve, monkeypatch):
    base = http_serve(corpus8.root / "shards", mode="stall")
    lst = url_list(corpus8, base, tmp_path)
    monkeypatch.setenv("WENET_LHOTSE_HTTP_STALL_S", "1")
    err = _read_in_thread(lst)["error"]
    assert isinstance(err, WenetDataError) and err.kind in ("timeout", "truncated")
    assert err.source.startswith(base) and "1" in err.message


@pytest.mark.parametrize("mode,kind", [("drop", "truncated"), ("lie_length", "truncated"),
                                       ("lie_content", "bad_tar"), ("error", "io")])
def test_lying_servers_give_clear_errors(corpus8, tmp_path, http_serve, mode, kind,
                                        monkeypatch):
    monkeypatch.setenv("WENET_LHOTSE_RETRY_BACKOFF_S", "0.01")  # 500 and cuts are retried
    base = http_serve(corpus8.root / "shards", mode=mode)
    lst = url_list(corpus8, base, tmp_path)
    err = _read_in_thread(lst)["error"]
    assert isinstance(err, WenetDataError) and err.kind == kind, err
    assert err.source.startswith(base) and "\n" not in str(err)
