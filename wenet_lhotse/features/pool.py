"""The process pool that runs the per-cut recipe (:class:`~.pipeline.CutPipeline`)
for :class:`~.strategy.PooledFeatures`, so one batch uses several cores even when the
DataLoader has a single worker (or none).

Why not ``concurrent.futures.ProcessPoolExecutor`` / Lhotse's ``OnTheFlyFeatures``:
DataLoader workers are daemonic processes, and Python refuses ``Process.start()`` in a
daemonic process (a daemon is killed without cleanup, which would orphan its children).
:class:`WorkerPool` takes over that responsibility itself, so it may start children there:

* its workers are daemonic (the DataLoader worker's exit handler terminates them),
* each worker exits on its own when its parent goes away (pipe EOF, or the parent pid
  changes -- checked every 0.5 s), so a SIGKILLed parent leaves no orphan behind,
* ``close()``, garbage collection and interpreter exit shut it down
  (``multiprocessing.util.Finalize``, which also runs in multiprocessing children where
  ``atexit`` does not);

and only then clears the daemon flag of the current process for the duration of
``Process.start()``. The pool is created lazily, in the process that first calls
:meth:`~.strategy.PooledFeatures.__call__` (a pool inherited through ``fork`` is dropped,
never used).

Results do not depend on the pool size or on which worker gets which cut: all
randomness of a cut (speed factor, dither noise, masks) comes from generators seeded by
``blake2b(seed, epoch, cut.id)``.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import queue
import signal
import threading
import time
from collections import deque
from contextlib import contextmanager
from multiprocessing.connection import Connection, wait
from typing import Any, Dict, List, Optional, Sequence

import torch

from wenet_lhotse.errors import WenetDataError
from wenet_lhotse.features.pipeline import CutPipeline

logger = logging.getLogger(__name__)

# Seconds between a worker's checks that its parent is still there.
_PARENT_POLL_S = 0.5


@contextmanager
def _may_start_children():
    """Let a daemonic process (a DataLoader worker) start child processes.

    ``BaseProcess.start()`` asserts the current process is not daemonic. The pool takes
    over what that rule protects (see the module docstring), so the flag is cleared for
    the duration of ``start()`` and restored afterwards.
    """
    config = mp.current_process()._config  # noqa: SLF001 -- no public API for this
    was_daemon = config.get("daemon", False)
    if was_daemon:
        config["daemon"] = False
    try:
        yield
    finally:
        if was_daemon:
            config["daemon"] = True


def _read_tasks(conn: Connection, tasks: queue.SimpleQueue, parent_pid: int) -> None:
    """Worker-side reader thread: move tasks off the pipe as soon as they arrive, so the
    parent's ``send`` never waits for the worker to finish a cut (no pipe deadlock with
    big payloads), and watch for the parent's death."""
    while True:
        try:
            if not conn.poll(_PARENT_POLL_S):
                if os.getppid() != parent_pid:
                    break  # parent died; we were re-parented
                continue
            msg = conn.recv()
        except (EOFError, OSError):
            break  # parent closed the pipe or died
        if msg is None:
            break
        tasks.put(msg)
    tasks.put(None)


def _worker_main(conn: Connection, pipeline: CutPipeline, parent_pid: int,
                 inherited: Sequence[Connection]) -> None:
    # Ctrl-C reaches the whole process group: let the parent decide, not the workers.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for other in inherited:  # siblings' parent ends, inherited through fork
        other.close()
    torch.set_num_threads(1)
    tasks: queue.SimpleQueue = queue.SimpleQueue()
    threading.Thread(target=_read_tasks, args=(conn, tasks, parent_pid), daemon=True,
                     name="task-reader").start()
    while True:
        msg = tasks.get()
        if msg is None:
            break
        index, cut, seed, augment = msg
        try:
            reply = ("ok", index, pipeline.process(cut, seed, augment))
        except WenetDataError as err:
            reply = ("err", index, err)
        except BaseException as err:  # noqa: BLE001 -- report anything, keep serving
            reply = ("err", index, WenetDataError(
                f"cut {_cut_id(cut)!r}: {type(err).__name__}: {err}",
                f"cut {_cut_id(cut)!r}", kind="worker"))
        try:
            conn.send(reply)
        except (BrokenPipeError, OSError):
            break


def _shutdown(procs: List[mp.Process], conns: List[Connection], owner_pid: int,
              timeout: float = 3.0) -> None:
    """Stop workers: ask, then terminate, then kill. No-op for a pool copied by fork."""
    for conn in conns:
        if os.getpid() == owner_pid:
            try:
                conn.send(None)
            except (OSError, ValueError):
                pass
        try:
            conn.close()
        except OSError:
            pass
    if os.getpid() != owner_pid:
        return
    deadline = time.monotonic() + timeout
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.terminate()
            p.join(1.0)
        if p.is_alive():
            p.kill()
            p.join(1.0)
    for p in procs:
        try:
            p.close()
        except ValueError:
            pass


class WorkerPool:
    """``num_workers`` processes that run :meth:`CutPipeline.process` on cut dicts.

    Workers read tasks in a separate thread, so the parent's sends never block on a
    worker busy sending its own result (big in-memory audio cannot deadlock the pipes).
    """

    #: Tasks queued per worker (one running, one waiting).
    prefetch = 2

    def __init__(self, pipeline: CutPipeline, num_workers: int,
                 start_method: Optional[str] = None) -> None:
        if num_workers < 1:
            raise ValueError("WorkerPool needs num_workers >= 1")
        if start_method is None:
            start_method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
        ctx = mp.get_context(start_method)
        self.owner_pid = os.getpid()
        self._procs: List[mp.Process] = []
        self._conns: List[Connection] = []
        try:
            with _may_start_children():
                for i in range(num_workers):
                    parent_end, child_end = ctx.Pipe(duplex=True)
                    inherited = list(self._conns) if start_method == "fork" else []
                    proc = ctx.Process(
                        target=_worker_main,
                        args=(child_end, pipeline, self.owner_pid, inherited),
                        name=f"wenet-lhotse-features-{i}",
                        daemon=True,
                    )
                    proc.start()
                    child_end.close()
                    self._procs.append(proc)
                    self._conns.append(parent_end)
        except BaseException:
            _shutdown(self._procs, self._conns, self.owner_pid)
            raise
        self._finalizer = mp.util.Finalize(
            self, _shutdown, args=(self._procs, self._conns, self.owner_pid), exitpriority=10
        )
        logger.debug("started %d feature workers (%s): %s", num_workers, start_method,
                     self.pids)

    @property
    def pids(self) -> List[int]:
        return [p.pid for p in self._procs]

    @property
    def alive(self) -> bool:
        return self._finalizer.still_active()

    def run(self, tasks: Sequence[tuple]) -> List[tuple]:
        """Run ``(index, cut, seed, augment)`` tasks; replies in task order.

        Each worker holds up to :attr:`prefetch` tasks, so it never waits for the parent
        between cuts; tasks go out longest audio first, so no worker is left with a long
        cut at the end of a batch. A worker that dies mid-task breaks the pool (closed)
        and raises ``RuntimeError`` naming the cut; any exception here (e.g.
        KeyboardInterrupt) also closes the pool, so no stale reply is read later.
        """
        results: List[Optional[tuple]] = [None] * len(tasks)
        todo = deque(sorted(range(len(tasks)), key=lambda i: -_task_size(tasks[i])))
        queued: Dict[Connection, deque] = {c: deque() for c in self._conns}
        pending = 0
        try:
            while todo or pending:
                for conn in self._conns:
                    while todo and len(queued[conn]) < self.prefetch:
                        i = todo.popleft()
                        try:
                            conn.send(tasks[i])
                        except OSError as err:  # BrokenPipeError: that worker is gone
                            raise RuntimeError(
                                f"a feature worker died before taking cut "
                                f"{_cut_id(tasks[i][1])!r}"
                            ) from err
                        queued[conn].append(i)
                        pending += 1
                busy = [c for c in self._conns if queued[c]]
                ready = wait(busy, timeout=5.0)
                if not ready:
                    self._check_alive(queued, tasks)
                for conn in ready:
                    try:
                        reply = conn.recv()
                    except (EOFError, OSError) as err:
                        raise RuntimeError(
                            f"a feature worker died while processing cut "
                            f"{_cut_id(tasks[queued[conn][0]][1])!r}"
                        ) from err
                    queued[conn].remove(reply[1])
                    pending -= 1
                    results[reply[1]] = reply
        except BaseException:
            self.close()
            raise
        return results  # type: ignore[return-value]

    def _check_alive(self, queued: Dict[Connection, deque], tasks: Sequence[tuple]) -> None:
        for proc, conn in zip(self._procs, self._conns):
            if queued[conn] and not proc.is_alive():
                raise RuntimeError(
                    f"feature worker pid {proc.pid} exited with code {proc.exitcode} while "
                    f"processing cut {_cut_id(tasks[queued[conn][0]][1])!r}"
                )

    def close(self) -> None:
        """Stop the workers (idempotent)."""
        self._finalizer()


def _task_size(task: tuple) -> float:
    """Audio duration (seconds) of a task's cut, for longest-first scheduling."""
    cut = task[1]
    duration = cut.get("duration") if isinstance(cut, dict) else getattr(cut, "duration", 0.0)
    return float(duration or 0.0)


def _cut_id(cut: Any) -> str:
    return str(cut.get("id") if isinstance(cut, dict) else getattr(cut, "id", "?"))
