"""The package's one process pool: :class:`ProcessPool`, a
``concurrent.futures.ProcessPoolExecutor`` whose workers end with the process that
started them, whichever thread started them, and which may be started inside a
DataLoader worker. :func:`~wenet_lhotse.io.parallel.map_bounded` (conversion, import,
shard writing, ``convert.executor``'s local pool) and
:class:`~wenet_lhotse.features.pool.WorkerPool` (per-cut features) both run on it.

Parent death -- one mechanism, a *lifeline* pipe (:class:`Lifeline`): the parent
creates a pipe per pool and never writes to it; only the parent holds its write end
(an ``os.register_at_fork`` handler closes every lifeline write end in each child
this process forks, pool workers and DataLoader workers included). Each worker runs a
watcher thread blocked on the read end: end-of-file means the parent is gone (the
kernel closes its descriptors however it ends, ``SIGKILL`` included), and the watcher
ends the worker *itself* with ``os._exit`` -- whatever its main thread is doing (a
read blocked in C, a long job), within milliseconds, never through a signal handler
that a thread blocked in C would only run later (issue 30: that kept orphans alive
for the 10 s grace window). A ``os.getppid()`` check every :data:`PARENT_POLL_S`
backs it up (a child forked by a path that skips the fork handlers could still hold
a write end). The job's temporary files stay behind; they are named after the dead
worker's pid, and the next write into their directory removes them
(:mod:`~wenet_lhotse.io.tempfiles`).

No output after the parent is gone: a worker moves a finished file into place only
inside :func:`commit` (a lock the watcher takes before it ends the worker, then the
parent is checked): once the watcher has seen the end-of-file, no rename starts.

Why not Linux ``PR_SET_PDEATHSIG`` (the previous ``io.parallel`` mechanism): it fires
when the *thread* that forked the worker exits, not the process. A pool started from
a short-lived thread, or lazily from whatever thread first submits, would lose its
workers while its parent still runs. A pipe's end-of-file belongs to the process.

``SIGTERM`` from the parent (:meth:`ProcessPool.terminate`) raises ``SystemExit`` in
the worker's job, so its ``finally``/``except`` blocks remove its temporary files, and
the worker exits :data:`TERM_CLEANUP_S` later (the executor's worker loop would catch
the ``SystemExit`` and serve on); a handler inherited by a process forked from a
worker ends that process with ``os._exit`` instead (a fork never returns into its
parent's code). ``SIGINT`` is ignored in workers: Ctrl-C reaches the whole process
group, and the parent decides. :meth:`ProcessPool.close` asks, terminates, then
kills: bounded in time. A worker told to end may still be in the executor's loop while
the executor tears the pool down (it marks the pool broken when the first worker exits
and closes the call queue); an error from that loop then (``EOFError``, ``OSError``
from the queue) ends the worker quietly instead of printing a traceback over the
command's own one-line error: the worker was ending anyway (:class:`_EndsQuietly`).
DataLoader workers of our loader get the parent-pid watcher too (:class:`EndWithParent`,
their ``worker_init_fn``).

Daemonic parents: Python refuses ``Process.start()`` in a daemonic process (a
DataLoader worker), since a daemon is killed without cleanup, which would orphan its
children. The lifeline takes over what that rule protects, so :meth:`ProcessPool.submit`
clears the daemon flag for the duration of the call that may start workers
(:func:`may_start_children`); :meth:`ProcessPool.close` (also run by
``multiprocessing.util.Finalize`` at a worker's exit, see
:class:`~wenet_lhotse.features.pool.WorkerPool`) asks, then terminates, then kills.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import threading
import time
import weakref
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from multiprocessing.connection import Connection
from typing import Any, Callable, Dict, Iterator, List, Optional, Set, Tuple

#: Seconds ``ProcessPool.shutdown(wait=True, cancel_futures=True)`` waits for the jobs
#: still running before it terminates, then kills, their workers.
SHUTDOWN_S = 5.0
#: Seconds a worker sent SIGTERM has to run its job's cleanup before it exits.
TERM_CLEANUP_S = 1.0
#: Seconds between a worker's backup checks of ``os.getppid()`` (the lifeline's
#: end-of-file wakes the watcher at once; this only bounds the fallback).
PARENT_POLL_S = 0.5

_lock = threading.Lock()  # held across fork, so no child sees a half-made lifeline
_write_ends: Set[int] = set()  # lifeline write ends this process holds


def _before_fork() -> None:
    _lock.acquire()


def _after_fork_in_parent() -> None:
    _lock.release()


def _after_fork_in_child() -> None:
    for fd in _write_ends:
        try:
            os.close(fd)
        except OSError:
            pass
    _write_ends.clear()
    _lock.release()


os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent,
                    after_in_child=_after_fork_in_child)


class Lifeline:
    """A pipe whose write end only this process holds: its read end (:attr:`reader`,
    a ``Connection`` that pickles to any start method's children) reaches
    end-of-file exactly when this process is gone or :meth:`close` is called."""

    def __init__(self) -> None:
        with _lock:
            read_fd, self._write_fd = os.pipe()
            _write_ends.add(self._write_fd)
        self.owner_pid = os.getpid()
        self.reader = Connection(read_fd, writable=False)
        self._closed = False

    def close(self) -> None:
        """Cut the line (idempotent; a no-op in a process that inherited the object).

        Idempotent by its own flag, not by looking the descriptor number up: once closed,
        the number may belong to a newer lifeline, which a second call (a pool's
        ``close()`` and later its garbage-collection finalizer) must not cut."""
        if os.getpid() != self.owner_pid:
            return
        with _lock:
            if self._closed:
                return
            self._closed = True
            if self._write_fd in _write_ends:
                _write_ends.discard(self._write_fd)
                os.close(self._write_fd)


_starting = True  # in a worker: still in worker_init
_ending = False  # in a worker: SIGTERM came; it exits within TERM_CLEANUP_S
_worker_pid = -1  # in a worker: its pid (a process forked from it has another)
_parent_pid = -1  # in a worker: the pool's owner
_commit_lock = threading.Lock()  # held by commit(); taken by the watcher before it ends


def _exit_on_sigterm(signum: int, frame: Any) -> None:
    if _starting or os.getpid() != _worker_pid:
        # nothing to clean up yet (SystemExit would print a traceback), or a process
        # forked from a worker: never unwind into the code it was forked from
        os._exit(128 + signum)
    # The executor's worker loop catches the SystemExit of a job (it is sent back as the
    # job's exception) and serves on: a timer ends the worker once the job's cleanup
    # had its time.
    global _ending
    _ending = True
    threading.Thread(target=_exit_after, args=(TERM_CLEANUP_S, 128 + signum),
                     daemon=True).start()
    raise SystemExit(128 + signum)


def _exit_after(seconds: float, code: int) -> None:
    time.sleep(seconds)
    os._exit(code)


def _watch_parent(lifeline: Connection, parent: int) -> None:
    """Worker thread: wait for the lifeline's end-of-file (or a new parent pid), then
    end the worker at once (see the module doc)."""
    try:
        while not lifeline.poll(PARENT_POLL_S) and os.getppid() == parent:
            pass
    except (OSError, ValueError):  # the descriptor went away: treat as gone
        pass
    _commit_lock.acquire()  # a rename under way finishes; none starts after this
    os._exit(128 + signal.SIGTERM)


def _poll_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(PARENT_POLL_S)
    os._exit(128 + signal.SIGTERM)


class EndWithParent:
    """A DataLoader ``worker_init_fn`` (wrapping ``inner``, if any) that ends the worker
    with ``os._exit`` within :data:`PARENT_POLL_S` seconds of its parent's death
    (``os.getppid()`` changes), whatever it is doing: torch's own check runs between
    batches, every 5 s, and never while the worker is blocked in a read. Picklable
    (spawned workers)."""

    def __init__(self, inner: Optional[Callable[[int], None]] = None) -> None:
        self.inner = inner

    def __call__(self, worker_id: int) -> None:
        threading.Thread(target=_poll_parent, args=(os.getppid(),), daemon=True,
                         name="parent-watchdog").start()
        if self.inner is not None:
            self.inner(worker_id)


@contextmanager
def commit() -> Iterator[None]:
    """Hold the block that moves a worker's finished output into place: in a pool
    worker, the parent is checked first (gone: ``SystemExit``, nothing is moved) and
    the watcher waits for the block to end. Elsewhere (the parent itself) a plain
    lock-free pass-through."""
    if os.getpid() != _worker_pid:
        yield
        return
    with _commit_lock:
        if os.getppid() != _parent_pid:
            raise SystemExit(128 + signal.SIGTERM)
        yield


def worker_init(lifeline: Connection, parent: int,
                initializer: Optional[Callable[..., None]] = None,
                initargs: Tuple = ()) -> None:
    """Pool-worker initializer: end with ``parent`` (see the module doc), then run the
    pool user's ``initializer(*initargs)``."""
    global _starting, _worker_pid, _parent_pid
    _starting = True
    _worker_pid, _parent_pid = os.getpid(), parent
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    threading.Thread(target=_watch_parent, args=(lifeline, parent), daemon=True,
                     name="parent-watchdog").start()
    if initializer is not None:
        initializer(*initargs)
    _starting = False


@contextmanager
def may_start_children() -> Iterator[None]:
    """Let a daemonic process (a DataLoader worker) start child processes.

    ``BaseProcess.start()`` asserts the current process is not daemonic. The pool takes
    over what that rule protects (see the module doc), so the flag is cleared for the
    duration of the block and restored afterwards.
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


class _EndsQuietly:
    """Mixin for the pool's worker process class: after ``SIGTERM`` (the worker is
    ending), an exception out of the executor's worker loop -- the call queue read while
    the executor closes it or another ending worker left it mid-message -- ends the
    process with the SIGTERM exit code instead of ``multiprocessing`` printing its
    traceback. Before ``SIGTERM`` nothing changes: such an error is news."""

    def run(self) -> None:
        try:
            super().run()  # type: ignore[misc]
        except Exception:
            if _ending:
                os._exit(128 + signal.SIGTERM)
            raise


# One worker class per start method, at module level so that ``spawn`` and
# ``forkserver`` pickle the process object by reference.
class _ForkWorker(_EndsQuietly, mp.context.ForkProcess):
    pass


class _SpawnWorker(_EndsQuietly, mp.context.SpawnProcess):
    pass


class _ForkServerWorker(_EndsQuietly, mp.context.ForkServerProcess):
    pass


_WORKERS = {"fork": _ForkWorker, "spawn": _SpawnWorker, "forkserver": _ForkServerWorker}


def _context(start_method: Optional[str]) -> mp.context.BaseContext:
    """A context of ``start_method`` (``None``: Python's default) whose ``Process`` is the
    pool's worker class: a new instance of that kind, so the shared one stays as it is."""
    name = mp.get_context(start_method).get_start_method()
    context = type(mp.get_context(name))()
    context.Process = _WORKERS[name]
    return context


class ProcessPool(ProcessPoolExecutor):
    """``num_workers`` processes that end with this one (see the module doc).

    ``initializer(*initargs)`` runs in each worker after the parent-death set-up;
    ``start_method``: ``"fork"``, ``"spawn"``, ``"forkserver"`` or ``None`` (Python's
    default). Used as any ``Executor``; :meth:`terminate` and :meth:`close` end it.
    """

    def __init__(self, num_workers: int, initializer: Optional[Callable[..., None]] = None,
                 initargs: Tuple = (), start_method: Optional[str] = None) -> None:
        self.owner_pid = os.getpid()
        self._lifeline = Lifeline()
        weakref.finalize(self, self._lifeline.close)  # garbage collected unclosed
        super().__init__(num_workers, mp_context=_context(start_method),
                         initializer=worker_init,
                         initargs=(self._lifeline.reader, self.owner_pid, initializer,
                                   initargs))

    def submit(self, fn, /, *args, **kwargs):  # type: ignore[override]
        with may_start_children():  # a submission may start workers
            return super().submit(fn, *args, **kwargs)

    def _workers(self) -> Dict[int, Any]:
        """pid -> ``multiprocessing.Process`` of the workers started so far (a copy:
        the executor's manager thread changes its own)."""
        return dict(getattr(self, "_processes", None) or {})

    @property
    def pids(self) -> List[int]:
        """Pids of the workers started so far."""
        return list(self._workers())

    @property
    def broken(self) -> bool:
        """Whether the executor marked itself unusable (a worker died under it)."""
        return bool(getattr(self, "_broken", False))

    def ended_workers(self) -> List[Tuple[int, Optional[int]]]:
        """``(pid, exit code)`` of the workers that have ended (a negative code is the
        signal)."""
        return [(pid, proc.exitcode) for pid, proc in self._workers().items()
                if not proc.is_alive()]

    def terminate(self) -> None:
        """Send the running workers ``SIGTERM``: they clean up and exit."""
        for proc in self._workers().values():
            if proc.is_alive():
                try:
                    proc.terminate()
                except OSError:
                    pass

    def close(self, timeout: float = 3.0) -> None:
        """Stop the workers: ask (they finish their job), wait up to ``timeout``
        seconds, then terminate, then kill. Idempotent; a no-op in a process that
        inherited this pool through ``fork`` (its workers are not ours)."""
        if os.getpid() == self.owner_pid:
            self._end_workers(timeout)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """``Executor.shutdown``; with ``wait`` and ``cancel_futures`` (the caller drops
        the work left: :func:`~wenet_lhotse.io.parallel.map_bounded` after an error or
        an early exit) bounded in time: a worker that has not ended within
        :data:`SHUTDOWN_S` seconds is terminated, then killed (the executor's own
        ``shutdown`` waits for ever on a stuck job). ``cancel_futures=False`` keeps the
        executor's contract: the submitted jobs run to their end."""
        if wait and cancel_futures and os.getpid() == self.owner_pid:
            self._end_workers(SHUTDOWN_S)
            return
        super().shutdown(wait=wait, cancel_futures=cancel_futures)
        if wait:  # the workers are gone: cut the line too
            self._lifeline.close()

    def _end_workers(self, timeout: float) -> None:
        procs = list(self._workers().values())
        super().shutdown(wait=False, cancel_futures=True)
        deadline = time.monotonic() + timeout
        for proc in procs:
            proc.join(max(0.0, deadline - time.monotonic()))
        for proc in procs:
            for end in (proc.terminate, proc.kill):
                if proc.is_alive():
                    end()
                    proc.join(1.0)
        self._lifeline.close()
        manager = self._executor_manager_thread
        if manager is not None and manager is not threading.current_thread():
            manager.join(timeout)
