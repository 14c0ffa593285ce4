"""io.pool: the one process pool. Its workers outlive the *thread* that started them
(PR_SET_PDEATHSIG would end them with it) and end with their parent *process*, SIGKILL
included -- for the feature pool and for map_bounded's pool, real processes by PID."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest
from adversarial import REPO, alive, kill, under_load, wait_until

from wenet_lhotse.io.pool import Lifeline, ProcessPool

# The child starts a pool from a thread that exits at once, prints the worker pids,
# then, for each line on stdin, runs a job from its main thread and prints the result.
_CHILD = textwrap.dedent("""
    import sys, threading
    kind = sys.argv[1]
    box = {}
    if kind == "features":
        from lhotse import CutSet, Recording
        from wenet_lhotse.features import PooledFeatures
        cuts = CutSet.from_cuts([Recording.from_file(sys.argv[2]).to_cut()])
        pf = PooledFeatures(num_workers=2)
        def start():
            pf(cuts)
            box["pids"] = pf.worker_pids
        def job():
            return len(pf(cuts).cuts)
    else:
        from wenet_lhotse.io.pool import ProcessPool
        pool = ProcessPool(2)
        def start():
            list(pool.map(abs, range(-8, 0)))
            box["pids"] = pool.pids
        def job():
            return sum(pool.map(abs, range(-8, 0)))
    t = threading.Thread(target=start)
    t.start()
    t.join()  # the thread that started the workers is gone
    print(" ".join(map(str, box["pids"])), flush=True)
    for _ in sys.stdin:
        print(job(), flush=True)
""")


@pytest.mark.parametrize("kind,expect", [("features", "1"), ("map", "36")])
def test_workers_outlive_their_starting_thread_and_die_with_the_parent(corpus, kind, expect):
    wav = str(corpus.root / "wav" / f"{corpus.keys[0]}.wav")
    proc = subprocess.Popen([sys.executable, "-c", _CHILD, kind, wav],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=str(REPO)))
    workers = []
    try:
        workers = [int(p) for p in proc.stdout.readline().split()]
        assert len(workers) == 2 and all(alive(p) for p in workers)
        for _ in range(2):  # the same workers keep serving after their thread ended
            proc.stdin.write("go\n")
            proc.stdin.flush()
            assert proc.stdout.readline().strip() == expect
            assert all(alive(p) for p in workers)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
        wait_until(lambda: not any(alive(p) for p in workers), 15,
                   f"workers {workers} to exit after their parent was SIGKILLed")
    finally:
        for p in [proc.pid, *workers]:  # by PID: only what this test started
            kill(p)
        proc.wait()


def test_lifeline_reaches_eof_only_when_cut():
    line = Lifeline()
    assert not line.reader.poll(0.05)  # the parent holds the write end: no EOF
    pid = os.fork()
    if pid == 0:  # the child's copy of the write end was closed by the fork handler
        code = 1
        try:
            code = 0 if not line.reader.poll(0.05) else 1
        finally:  # every path of a fork ends here, never in pytest's code
            os._exit(code)
    assert os.waitpid(pid, 0)[1] == 0
    line.close()
    assert line.reader.poll(1.0)
    with pytest.raises(EOFError):
        line.reader.recv_bytes()
    line.close()  # idempotent


def test_closing_a_line_twice_never_cuts_a_newer_line_on_the_same_descriptor():
    """A pool's ``close()`` and, later, its garbage-collection finalizer both close its
    lifeline. By then the descriptor number may belong to a newer pool's lifeline: the
    second call must not cut it (that pool's workers would end mid-batch)."""
    old = Lifeline()
    number = old._write_fd
    old.reader.close()  # (its number, lower, is free for the newer read end below)
    old.close()
    # The kernel gives out the lowest free numbers: fill every free one below `number`
    # but one, so that the newer pipe's read end takes that one and its write end `number`.
    fillers = []
    while (fd := os.open(os.devnull, os.O_RDONLY)) != number:
        fillers.append(fd)
    os.close(fd)
    os.close(fillers.pop())
    newer = Lifeline()
    for fd in fillers:
        os.close(fd)
    assert newer._write_fd == number
    old.close()  # the late second call
    assert not newer.reader.poll(0.05)  # the newer line still holds: no EOF
    newer.close()
    assert newer.reader.poll(1.0)
    newer.reader.close()


def test_close_ends_workers_and_cuts_the_line():
    pool = ProcessPool(2)
    assert sorted(pool.map(abs, [-1, -2, -3])) == [1, 2, 3]
    pids = pool.pids
    assert len(pids) == 2
    pool.close()
    assert not any(alive(p) for p in pids)
    assert pool._lifeline.reader.poll(1.0)  # EOF: any straggler would exit too
    with pytest.raises(RuntimeError):
        pool.submit(abs, -1)


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_cutting_the_line_ends_a_worker_of_any_start_method(method):
    """The lifeline's read end reaches spawned and forkserver workers too (pickled with
    the process arguments): cut, the worker exits although its parent lives on."""
    pool = ProcessPool(1, start_method=method)
    try:
        pid = pool.submit(os.getpid).result(timeout=120)
        assert pid in pool.pids and alive(pid)
        pool._lifeline.close()
        wait_until(lambda: not alive(pid), 15, f"{method} worker {pid} to exit")
    finally:
        pool.close()


def _stuck(fifo: str) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a job that swallows SIGTERM
    open(fifo + ".started", "w").close()
    with open(fifo, "rb") as f:  # and blocks in C
        f.read()


def test_shutdown_after_an_error_is_bounded_in_time(tmp_path, monkeypatch):
    """Issue 30: a pool's shutdown hung until pytest's 600 s timeout. After the caller
    gives up on the work (cancel_futures), a stuck worker is terminated, then killed."""
    import time

    from wenet_lhotse.io import pool as pool_mod

    monkeypatch.setattr(pool_mod, "SHUTDOWN_S", 1.0)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    pool = ProcessPool(1, start_method="fork")
    pool.submit(_stuck, str(fifo))
    wait_until(lambda: os.path.exists(f"{fifo}.started"), 60, "the job to start")
    (pid,) = pool.pids
    start = time.monotonic()
    pool.shutdown(wait=True, cancel_futures=True)
    took = time.monotonic() - start
    assert not alive(pid)
    assert took < 1.0 + 2 * 1.0 + under_load(3.0), took  # SHUTDOWN_S, the two joins, slack


def _break_own_queue(then_sigterm: bool) -> None:
    """Job: close this worker's end of the executor's call queue, then (``then_sigterm``)
    take the SIGTERM the pool sends on an early exit. The executor's loop catches the
    job's SystemExit (or its return) and reads the queue again, as a worker does when the
    executor tears the queue down under it."""
    import time

    frame = sys._getframe()
    while frame.f_code.co_name != "_process_worker":  # the executor's worker loop
        frame = frame.f_back
    frame.f_locals["call_queue"]._reader.close()
    if then_sigterm:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(30)  # SystemExit is raised here


@pytest.mark.parametrize("method,sigterm", [("fork", True), ("spawn", True), ("fork", False)])
def test_a_worker_ending_on_sigterm_leaves_no_traceback_when_its_queue_breaks(
        capfd, method, sigterm):
    """A worker sent SIGTERM serves on for its cleanup time; a call queue that breaks
    under it then (the executor closes it when the pool breaks) ends it quietly with the
    SIGTERM code: no ``Traceback ... EOFError`` over the command's one-line error (seen
    once in CI under ``import -o``). Without the SIGTERM the same error is still shown:
    then it is news."""
    from concurrent.futures import wait

    pool = ProcessPool(1, start_method=method)
    try:
        future = pool.submit(_break_own_queue, sigterm)
        wait([future], timeout=60)
        if sigterm:
            assert isinstance(future.exception(), SystemExit)
        wait_until(lambda: pool.ended_workers(), 60, "the worker to end")
        code = pool.ended_workers()[0][1]
    finally:
        pool.close()
    err = capfd.readouterr().err
    if sigterm:
        assert code == 128 + signal.SIGTERM
        assert "Traceback" not in err and "handle is closed" not in err, err
    else:
        assert code == 1 and "OSError: handle is closed" in err, err
