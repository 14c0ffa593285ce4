"""SIGTERM ends the test session with every process it started (issue 30: under
``timeout 900 python -m pytest`` the signal became a test failure, a pool shutdown
hung, and a forked child of pytest ran the rest of the suite).

:func:`install` (called by conftest at start-up, only where SIGTERM still has its
default action) sets a handler that ends the session's descendants (SIGTERM, then
SIGKILL after :data:`CHILDREN_GRACE_S` seconds), says so in one line and exits with
``os._exit(128 + SIGTERM)``. A process forked from the session that still has the
handler exits at once, never returning into pytest's code. Ctrl-C stays pytest's own
(``KeyboardInterrupt``: the session stops and the fixtures tear down their servers)."""

from __future__ import annotations

import os
import signal
import sys
import threading

#: Seconds the session's children get between SIGTERM and SIGKILL.
CHILDREN_GRACE_S = 2.0

_session_pid = -1


def _end_session(signum: int, frame: object) -> None:
    if os.getpid() != _session_pid:
        os._exit(128 + signum)
    ended = 0
    try:
        import psutil

        procs = psutil.Process().children(recursive=True)
        for p in procs:
            try:
                p.terminate()
            except psutil.Error:
                pass
        _, alive = psutil.wait_procs(procs, timeout=CHILDREN_GRACE_S)
        for p in alive:
            try:
                p.kill()
            except psutil.Error:
                pass
        ended = len(procs)
    finally:
        try:
            sys.stderr.write(f"\npytest: signal {signum}: session ended with its "
                             f"{ended} child processes\n")
            sys.stderr.flush()
        finally:
            os._exit(128 + signum)


def install() -> None:
    global _session_pid
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, None):
        return
    _session_pid = os.getpid()
    signal.signal(signal.SIGTERM, _end_session)
