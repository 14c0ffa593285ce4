"""Opening byte streams for WeNet inputs, and atomic output files.

:func:`open_input` reads, sequentially and without seeking (so tars can be
streamed from anywhere), one of:

* a local path (``/data/shards_000000000.tar``, or relative to the working directory);
* ``file://PATH``;
* an ``http://`` / ``https://`` URL, streamed with urllib3 (WeNet pipes these
  through ``wget -O -``; we stream in-process, check the HTTP status, and resume a
  dropped connection with a range request: :mod:`wenet_lhotse.io.http_reader`);
* ``pipe:CMD``: the standard output of a shell command (``pipe:aws s3 cp s3://b/x.tar -``),
  only with the read policy's pipe opt-in (a command from data is never run otherwise:
  :meth:`~wenet_lhotse.io.policy.ReadPolicy.check_pipe`).
  A command that exits with a non-zero status after its output was read to the
  end is an error naming the command and the tail of its stderr;
* ``s3://`` and any other fsspec URL: :mod:`wenet_lhotse.io.remote` (transient
  failures retried, reading resumed at the byte offset reached).

Network reads have limits and retries (:class:`ReadLimits`, from the environment by
default): no byte for ``stall_s`` seconds, a response not finished within
``deadline_s``, or one tar member not read within ``member_deadline_s`` is an error
(kind ``"timeout"``) naming the URL and the member; transient failures are retried
``retries`` times (HTTP and object storage alike).

:func:`atomic_output` writes a file (or object-store object) so that a reader never
sees it half written.
:class:`TailReader` wraps a stream so that where ``tarfile`` stopped can be checked.
"""

from __future__ import annotations

import dataclasses
import errno
import functools
import io
import logging
import os
import subprocess
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, Iterable, Iterator, List, Optional, Tuple, Union

from lhotse.utils import Pathlike

from wenet_lhotse.errors import WenetDataError
from wenet_lhotse.io.access import open_regular
from wenet_lhotse.io.http_reader import HttpReader
from wenet_lhotse.io.policy import ReadPolicy
from wenet_lhotse.io.pool import commit
from wenet_lhotse.io.remote import is_remote, open_remote, remote_output
from wenet_lhotse.io.tempfiles import remove_stale_temp_files, temp_prefix

logger = logging.getLogger(__name__)

#: Tar block size (bytes).
BLOCK = 512

#: Bytes requested per read from HTTP and pipe streams.
_CHUNK = 1 << 16


def same_file(a: Pathlike, b: Pathlike) -> bool:
    """True when ``a`` and ``b`` name the same existing file (links resolved)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def as_path_list(paths: Union[Pathlike, Iterable[Pathlike]]) -> List[str]:
    """One path or an iterable of paths -> list of str."""
    if isinstance(paths, (str, os.PathLike)):
        return [str(paths)]
    return [str(p) for p in paths]


def is_url(name: str) -> bool:
    """True for ``http://`` and ``https://`` addresses."""
    return name.startswith(("http://", "https://"))


def is_pipe(name: str) -> bool:
    """True for ``pipe:CMD`` inputs."""
    return name.startswith("pipe:")


def is_local(name: str) -> bool:
    """True when ``name`` is a local path (not a URL nor a pipe)."""
    return not (is_url(name) or is_pipe(name) or is_remote(name))


def local_path(name: str) -> str:
    """The filesystem path of a local input (strips ``file://``)."""
    return name[len("file://"):] if name.startswith("file://") else name


class _PipeReader(io.RawIOBase):
    """Standard output of a shell command as a readable raw stream.

    Closing it after reading to EOF waits for the command and raises a
    :class:`WenetDataError` (kind ``"io"``) if it failed; closing it early kills it.
    """

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name
        self._stderr = tempfile.TemporaryFile()
        self._proc = subprocess.Popen(
            name[len("pipe:"):], shell=True, stdout=subprocess.PIPE, stderr=self._stderr
        )
        self._eof = False

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        n = self._proc.stdout.readinto(b)
        if n == 0:
            self._eof = True
        return n

    def close(self) -> None:
        if self.closed:
            return
        try:
            if self._eof:
                code = self._proc.wait()
                if code != 0:
                    self._stderr.seek(0)
                    tail = self._stderr.read()[-500:].decode("utf-8", "replace").strip()
                    raise WenetDataError(
                        f"command exited with status {code}: {tail}", self.name, kind="io"
                    )
            else:  # the reader stopped early: don't let the command block on a full pipe
                self._proc.kill()
                self._proc.wait()
        finally:
            self._proc.stdout.close()
            self._stderr.close()
            super().close()


def open_input(name: str, timeout: Optional[float] = None, *,
               policy: Optional[ReadPolicy] = None) -> BinaryIO:
    """Open a local path, ``file://``, ``http(s)://`` URL or ``pipe:CMD`` for sequential
    binary reading. A missing local file raises :class:`WenetDataError` (kind
    ``"missing_file"``); a failed HTTP request one of kind ``"io"``; a ``pipe:``
    the policy does not allow one of kind ``"refused"`` (nothing is run).

    :param timeout: HTTP stall timeout (seconds); overrides ``limits.stall_s``.
    :param policy: the pipe opt-in, network time limits and extra URL protocols
        (default: :class:`~wenet_lhotse.io.policy.ReadPolicy`'s, from the environment).
    """
    name = str(name)
    policy = (policy or ReadPolicy())
    limits = policy.read_limits()
    if is_remote(name):
        return open_remote(name, policy=policy)
    if is_pipe(name):
        policy.check_pipe(name)
        return io.BufferedReader(_PipeReader(name), buffer_size=_CHUNK)
    if is_url(name):
        if timeout is not None:
            limits = dataclasses.replace(limits, stall_s=timeout)
        return io.BufferedReader(HttpReader(name, limits), buffer_size=_CHUNK)
    path = local_path(name)
    try:
        return open_regular(path, name)  # a FIFO would block open() forever
    except FileNotFoundError as e:
        raise WenetDataError("no such file", name, kind="missing_file") from e
    except OSError as e:
        raise WenetDataError(f"cannot open: {e}", name, kind="io") from e


@functools.lru_cache(maxsize=1)
def _umask() -> int:
    mask = os.umask(0o022)  # os.umask can only be read by setting it
    os.umask(mask)
    return mask


@contextmanager
def atomic_output(path: Pathlike, mode: str = "wb", encoding: Optional[str] = None) -> Iterator:
    """Open a temporary file next to ``path``; on success flush, fsync and
    ``os.replace`` it onto ``path``; on error remove it. Parent dirs are created.
    The result gets the permissions a plain ``open()`` gives (0666 minus the umask),
    not ``mkstemp``'s 0600, so files written for a team stay readable by it.
    An object-store URL is written with :func:`~wenet_lhotse.io.remote.remote_output`
    (the object appears only when the upload completes).

    The temporary file is named ``.<name>.<pid>@<host>.XXXXXXXX.tmp`` (shortened for
    long names); the first write into a directory removes such files left there by
    writers on this host that are no longer running (killed), never a live one's."""
    if is_remote(str(path)):
        with remote_output(str(path), mode) as f:
            yield f
        return
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temp_files(path.parent)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=temp_prefix(path.name), suffix=".tmp")
    try:
        with os.fdopen(fd, mode, encoding=encoding) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        with commit():  # in a pool worker: never after its parent is gone
            os.replace(tmp, path)
    except BaseException as err:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        if isinstance(err, OSError) and err.errno in _FULL and not err.filename:
            # a write's own error names no file: say which one could not be written
            raise OSError(err.errno, f"{err.strerror} (writing it)", str(path)) from None
        raise


#: The errors of a write that found no room (disk full, quota, file size limit).
_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


class TailReader(io.RawIOBase):
    """Counts the bytes read through it and keeps the last few reads, so that the
    block where ``tarfile`` stopped can be inspected afterwards (``tarfile`` ends
    silently on a truncated or invalid header)."""

    def __init__(self, raw, member_deadline_s: Optional[float] = None,
                 source: str = "") -> None:
        super().__init__()
        self._raw = raw
        self.pos = 0
        self._chunks: List[Tuple[int, bytes]] = []
        self._member_deadline_s = member_deadline_s
        self._source = source
        self._member: Optional[str] = None
        self._member_end = float("inf")

    def start_member(self, member: str) -> None:
        """Tar member ``member`` is read from now on: it must be read within the
        member deadline (checked after each read; HTTP streams also bound each wait)."""
        if self._member_deadline_s is None:
            return
        self._member = member
        self._member_end = time.monotonic() + self._member_deadline_s
        raw = getattr(self._raw, "raw", None)
        if hasattr(raw, "watch_member"):
            raw.watch_member(member, self._member_end)

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        data = self._raw.read(n)
        if self._member is not None and time.monotonic() > self._member_end:
            raise WenetDataError(f"member not read within {self._member_deadline_s:g} s "
                                 "(WENET_LHOTSE_MEMBER_DEADLINE_S)", self._source,
                                 member=self._member, kind="timeout")
        if data:
            self._chunks.append((self.pos, data))
            del self._chunks[:-3]
            self.pos += len(data)
        return data

    def readinto(self, b) -> int:
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)

    def block_at(self, offset: int) -> Optional[bytes]:
        """The bytes at [offset, offset + 512) (fewer at EOF), then read to the end
        (so that a pipe's exit status can be checked); None if no longer kept."""
        while self.pos < offset + BLOCK and self.read(BLOCK * 20):
            pass
        start = self._chunks[0][0] if self._chunks else self.pos
        block = None
        if offset >= start:
            block = b"".join(c for _, c in self._chunks)[offset - start: offset - start + BLOCK]
        while self.read(1 << 16):  # end-of-archive padding: usually < 10 KiB
            pass
        return block

    def close(self) -> None:
        if not self.closed:
            try:
                self._raw.close()  # a pipe reports its command's failure here
            finally:
                super().close()

    def close_error(self) -> Optional[WenetDataError]:
        """Close, returning (not raising) the error a failed command/download reports."""
        try:
            self.close()
        except WenetDataError as e:
            return e
        return None
