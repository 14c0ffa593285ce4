"""Time limits and retries of network reads (HTTP and object storage alike).

* :class:`ReadLimits`: the limits (seconds) and retry counts, by default from the
  environment.
* :class:`Deadlines`: one stream's clock against them: the whole-response deadline
  (from when the stream was opened), the current tar member's deadline, and the
  longest wait for the next piece of data.
* :class:`BoundedCaller`: runs blocking calls on a helper thread and gives up on one
  that does not return in time. Object-storage libraries (fsspec, s3fs) offer no
  per-call deadline, and their own timeouts and retries can add up to minutes; a
  call given up on is left to finish on its (daemon) thread, its result dropped.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

#: Consecutive failed attempts tolerated per read, and the first wait (seconds) of the
#: exponential backoff between them (0.5, 1, 2, 4, 8 s: ~15 s before giving up);
#: ``$WENET_LHOTSE_RETRIES`` and ``$WENET_LHOTSE_RETRY_BACKOFF_S`` override them.
RETRIES = 5
BACKOFF = 0.5


def default_retries() -> int:
    """``$WENET_LHOTSE_RETRIES`` if set, else :data:`RETRIES`."""
    value = os.environ.get("WENET_LHOTSE_RETRIES")
    if not value:
        return RETRIES
    if not value.isdigit():
        raise ValueError(f"$WENET_LHOTSE_RETRIES={value!r} is not a count (0, 1, 2, ...)")
    return int(value)


def default_backoff() -> float:
    """``$WENET_LHOTSE_RETRY_BACKOFF_S`` (seconds) if set, else :data:`BACKOFF`."""
    value = os.environ.get("WENET_LHOTSE_RETRY_BACKOFF_S")
    if not value:
        return BACKOFF
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not seconds >= 0:
        raise ValueError(f"$WENET_LHOTSE_RETRY_BACKOFF_S={value!r} is not a number of "
                         "seconds >= 0")
    return seconds


def _env_seconds(name: str, default: float) -> float:
    value = os.environ.get(name)
    if not value:
        return default
    try:
        seconds = float(value)
    except ValueError:
        raise ValueError(f"${name}={value!r} is not a number of seconds") from None
    if not seconds > 0:
        raise ValueError(f"${name}={value!r} must be > 0 seconds")
    return seconds


@dataclass(frozen=True)
class ReadLimits:
    """Time limits (seconds) and retries of network reads (``http(s)://`` and object
    storage). Defaults come from the environment when the object is made
    (``WENET_LHOTSE_HTTP_STALL_S``, ``WENET_LHOTSE_HTTP_DEADLINE_S``,
    ``WENET_LHOTSE_MEMBER_DEADLINE_S``, ``WENET_LHOTSE_RETRIES``,
    ``WENET_LHOTSE_RETRY_BACKOFF_S``), so DataLoader workers and CLI runs see them.

    :param stall_s: longest wait for any byte (connect or read; for object storage:
        for one range request, at most 8 MiB); default 60.
    :param deadline_s: longest time for one whole response (one tar, one audio
        file); default 3600.
    :param member_deadline_s: longest time to read one tar member; default 600.
    :param retries: consecutive transient failures retried; default 5.
    :param backoff_s: first wait between retries, doubled each time; default 0.5.
    """

    stall_s: float = field(
        default_factory=lambda: _env_seconds("WENET_LHOTSE_HTTP_STALL_S", 60.0))
    deadline_s: float = field(
        default_factory=lambda: _env_seconds("WENET_LHOTSE_HTTP_DEADLINE_S", 3600.0))
    member_deadline_s: float = field(
        default_factory=lambda: _env_seconds("WENET_LHOTSE_MEMBER_DEADLINE_S", 600.0))
    retries: int = field(default_factory=default_retries)
    backoff_s: float = field(default_factory=default_backoff)


class Deadlines:
    """One stream's clock (``time.monotonic()`` seconds) against :class:`ReadLimits`."""

    def __init__(self, limits: ReadLimits) -> None:
        self.limits = limits
        self.end = time.monotonic() + limits.deadline_s
        self.member_end = float("inf")

    def time_left(self) -> float:
        """Seconds until the nearer deadline (negative once passed)."""
        return min(self.end, self.member_end) - time.monotonic()

    def passed(self) -> Optional[str]:
        """What ran out, in words with the variable to raise; None if nothing did."""
        now = time.monotonic()
        if now >= self.end:
            return (f"download not finished within its {self.limits.deadline_s:g} s "
                    "deadline (WENET_LHOTSE_HTTP_DEADLINE_S)")
        if now >= self.member_end:
            return (f"member not read within {self.limits.member_deadline_s:g} s "
                    "(WENET_LHOTSE_MEMBER_DEADLINE_S)")
        return None

    def wait_s(self) -> float:
        """The longest wait for the next data: the stall limit, never past a deadline
        (call :meth:`passed` first)."""
        return max(0.01, min(self.limits.stall_s, self.time_left()))

    def stall_message(self) -> str:
        return self.passed() or (f"no data for {self.limits.stall_s:g} s "
                                 "(WENET_LHOTSE_HTTP_STALL_S)")


class BoundedCaller:
    """Runs calls one at a time on a daemon thread of its own (started on first use);
    :meth:`call` waits at most ``timeout`` seconds. After a call timed out the thread
    is abandoned (it may still be stuck in that call) and the next call starts a new
    one."""

    def __init__(self) -> None:
        self._jobs: Optional[queue.SimpleQueue] = None

    def call(self, timeout: float, fn: Callable[..., Any], *args) -> Any:
        """``fn(*args)``; :class:`TimeoutError` if it has not returned after ``timeout``
        seconds; its exception if it raised one."""
        if self._jobs is None:
            self._jobs = queue.SimpleQueue()
            threading.Thread(target=_serve, args=(self._jobs,), daemon=True,
                             name="wenet-lhotse-read").start()
        done, box = threading.Event(), []
        self._jobs.put((fn, args, box, done))
        if not done.wait(timeout):
            self._jobs.put(None)  # ends the thread once (if ever) the call returns
            self._jobs = None
            raise TimeoutError(f"no result within {timeout:g} s")
        ok, value = box[0]
        if ok:
            return value
        raise value

    def close(self) -> None:
        if self._jobs is not None:
            self._jobs.put(None)
            self._jobs = None


def _serve(jobs: queue.SimpleQueue) -> None:
    while True:
        job = jobs.get()
        if job is None:
            return
        fn, args, box, done = job
        try:
            box.append((True, fn(*args)))
        except BaseException as err:  # handed to the caller
            box.append((False, err))
        finally:
            done.set()
