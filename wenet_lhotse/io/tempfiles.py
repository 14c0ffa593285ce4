"""Names of the temporary files behind atomic writes, and the removal of those left by
writers that were killed.

A temporary file for ``name`` is ``.<name>.<pid>@<host>.XXXXXXXX.tmp`` in the target's
directory: the writer's PID and a 6-hex-digit hash of its host name say who owns it.
A file whose owner is on this host and no longer running is stale (a ``kill -9``
leaves it; any other exit removes it) and is removed by the next write into that
directory. Files of live writers and of other hosts (a shared filesystem) are never
touched. The name is shortened so that the whole fits in 255 bytes.

:func:`output_lock` makes a directory writer exclusive (two ``import --shar`` into one
directory deleted each other's live temporary files).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import socket
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Set

logger = logging.getLogger(__name__)

#: This host, as it appears in temporary file names.
HOST_TAG = hashlib.blake2b(socket.gethostname().encode("utf-8", "replace"),
                           digest_size=3).hexdigest()

# mkstemp's random part: 8 characters of [a-z0-9_]
_STALE = re.compile(r"^\..*\.(\d+)@([0-9a-f]{6})\.[a-z0-9_]{8}\.tmp$", re.DOTALL)
_NAME_MAX = 255
_cleaned: Set[str] = set()


def temp_prefix(name: str) -> str:
    """The ``mkstemp`` prefix for a temporary file of target file name ``name``."""
    tag = f".{os.getpid()}@{HOST_TAG}."
    budget = _NAME_MAX - 1 - len(tag) - 8 - len(".tmp")
    raw = name.encode("utf-8", "surrogateescape")
    if len(raw) > budget:
        name = raw[:budget].decode("utf-8", "ignore")
    return f".{name}{tag}"


def process_running(pid: int) -> bool:
    """True when process ``pid`` exists on this host (a zombie counts as running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def remove_stale_temp_files(directory: os.PathLike) -> int:
    """Remove the temporary files in ``directory`` whose writer (on this host) is dead;
    once per directory per process. Returns how many were removed."""
    key = os.path.realpath(directory)
    if key in _cleaned:
        return 0
    _cleaned.add(key)
    removed = 0
    try:
        entries = list(os.scandir(key))
    except OSError:
        return 0
    for entry in entries:
        if not entry.name.endswith(".tmp"):
            continue
        m = _STALE.match(entry.name)
        if m is None or m.group(2) != HOST_TAG:
            continue
        pid = int(m.group(1))
        if pid == os.getpid() or process_running(pid):
            continue
        try:
            os.unlink(entry.path)
            removed += 1
        except OSError:
            pass
    if removed:
        logger.info("removed %d stale temporary files of killed writers in %s", removed, key)
    return removed


_lock_fds: Set[int] = set()  # output locks this process holds


def _close_locks_in_child() -> None:
    # A forked child (a pool worker) shares the lock's open file description: holding
    # it would keep the lock after the writer is killed, refusing an immediate rerun
    # (issue 30). Closing the child's copy leaves the lock to the writer alone.
    for fd in _lock_fds:
        try:
            os.close(fd)
        except OSError:
            pass
    _lock_fds.clear()


os.register_at_fork(after_in_child=_close_locks_in_child)


class OutputLocked(OSError):
    """Another writer holds the lock of an output directory (one line, not bad data)."""


@contextmanager
def output_lock(out_dir: str) -> Iterator[None]:
    """Hold an exclusive ``fcntl.flock`` on ``.<out_dir name>.lock`` beside ``out_dir``
    (inside it, a reader such as Lhotse's Shar would take it for a shard) for the
    block; a second writer fails at once with :class:`OutputLocked` naming the holder.
    The kernel releases the lock when its holder dies, so no stale lock outlives a
    ``kill -9``; processes forked while it is held (pool workers) close their copy, so
    the lock ends with the writer, not with its last child. (On NFS, ``flock`` is only
    as good as the mount's locking.)"""
    import fcntl

    path = Path(out_dir).absolute()
    lock = path.parent / f".{path.name}.lock"
    fd = os.open(lock, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o666)
    _lock_fds.add(fd)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode("ascii", "replace").strip() or "?"
            raise OutputLocked(f"{out_dir}: another writer ({holder}) is writing this "
                               f"directory (lock {lock}); wait for it to finish") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}".encode(), 0)
        yield
    finally:
        _lock_fds.discard(fd)
        os.close(fd)  # releases the lock
