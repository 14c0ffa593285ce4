"""Object storage (``s3://``, ``gs://``, ``az://``, ... any fsspec URL): reading that
survives a dropped connection, atomic writes, directory listing, and Lhotse's IO.

Reading (:class:`RetryingReader`, :func:`open_remote`) goes through fsspec (s3fs for
``s3://``), which fetches the object in byte ranges of ``block_size``. A transient
failure (connection reset or cut short, timeout, HTTP 5xx, throttling) is retried:
s3fs first retries the failed range itself; if it gives up, we reopen the object
with backoff and continue *from the byte offset already handed to the reader* (a
range request), so a blip loses nothing and no byte is delivered twice. A permanent
failure (no such bucket or object, access denied, or transient errors that outlast
``retries``) raises :class:`~wenet_lhotse.errors.WenetDataError` (kind
``"io"`` or ``"missing_file"``) naming the URL; the shard reader adds the member
reached and a fault-tolerant reader counts it. Reads are bounded in time like HTTP
reads (:class:`~wenet_lhotse.io.read_limits.ReadLimits`: each call into fsspec
within the stall limit, the object within the deadlines; final, kind ``"timeout"``).

Credentials, endpoints and regions come only from the library's standard places
(for S3: ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``/``AWS_PROFILE``,
``~/.aws/config``, ``AWS_ENDPOINT_URL``; or fsspec's ``FSSPEC_S3_*`` variables and
config files); this module never reads, passes or logs them.

Writing (:func:`remote_output`) hands the bytes to fsspec and commits only on
success: an S3 object appears when its (multipart) upload completes, and a failed
write is discarded, so a reader never sees half a file -- the object-store
counterpart of :func:`wenet_lhotse.io.streams.atomic_output`.

:func:`~wenet_lhotse.io.lhotse_io.install_lhotse_io_backend` registers the
same reader and writer as a Lhotse IO backend, so Lhotse's own readers and writers
(``CutSet.from_file``, Shar tars and manifests, ``SharWriter``) take these URLs too;
importing :mod:`wenet_lhotse.formats` (so any of its modules) installs it. Lhotse
would need ``smart_open`` for them and has no resume-at-offset; without
``smart_open`` it refuses them.

:class:`ResumableReader` is the retry-and-resume loop; :class:`RetryingReader` runs it
over fsspec, :class:`~wenet_lhotse.io.http_reader.HttpReader` over urllib3.
``http(s)://`` stays with :mod:`wenet_lhotse.io.http_reader` for WeNet inputs
(WeNet's semantics).
"""

from __future__ import annotations

import dataclasses
import io
import logging
import re
import time
from contextlib import contextmanager
from typing import BinaryIO, Iterable, Iterator, List, Optional

from wenet_lhotse.errors import WenetDataError, is_worker_death, reraise_worker_death
from wenet_lhotse.io.access import check_url
from wenet_lhotse.io.policy import ReadPolicy
from wenet_lhotse.io.read_limits import (  # noqa: F401  (re-exported)
    BACKOFF,
    RETRIES,
    BoundedCaller,
    Deadlines,
    ReadLimits,
    default_backoff,
    default_retries,
)

logger = logging.getLogger(__name__)

#: Bytes per range request (s3fs's default is 50 MiB per open file: too much
#: memory with many DataLoader workers each streaming a tar).
BLOCK_SIZE = 8 << 20

_SCHEME = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://")
#: Schemes handled elsewhere: local files, and WeNet's http(s) (io.streams).
_NOT_REMOTE = {"file", "http", "https"}


def url_scheme(name: str) -> Optional[str]:
    """``"s3"`` for ``s3://b/k``; None for a path or ``pipe:`` command."""
    m = _SCHEME.match(str(name))
    return m.group(1).lower() if m else None


def is_remote(name: str) -> bool:
    """True for object-storage URLs read through fsspec (``s3://``, ``gs://``, ...)."""
    scheme = url_scheme(name)
    return scheme is not None and scheme not in _NOT_REMOTE


def _filesystem(url: str, protocols: Optional[Iterable[str]] = None):
    """fsspec's filesystem and path of ``url``, its protocol checked first against the
    allow-list (plus ``protocols``, a policy's ``url_protocols``)."""
    import fsspec

    check_url(url, extra=protocols)  # the allow-list: no archive, cache or ftp filesystems

    try:
        return fsspec.core.url_to_fs(url)
    except (ImportError, ValueError) as e:  # e.g. gcsfs not installed, unknown protocol
        raise WenetDataError(f"cannot open this URL: {e}", url, kind="io") from None


def _status(err: BaseException) -> Optional[int]:
    """The HTTP status carried by a botocore/aiohttp error, if any."""
    resp = getattr(err, "response", None)
    if isinstance(resp, dict):
        status = resp.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return int(status) if status else None
    status = getattr(err, "status", None)
    return status if isinstance(status, int) else None


def is_transient(err: BaseException) -> bool:
    """Worth retrying: network trouble, timeouts, 5xx, throttling. Not: a missing
    object or bucket, denied access, bad arguments, or bad data -- nor torch's error for a
    killed DataLoader worker, which its SIGCHLD handler can raise inside a read here."""
    if is_worker_death(err):
        return False
    if isinstance(err, (FileNotFoundError, PermissionError, IsADirectoryError,
                        NotADirectoryError, WenetDataError, ValueError, TypeError)):
        return False
    if "Credentials" in type(err).__name__:  # botocore's NoCredentialsError, ...
        return False
    if type(err).__name__ in ("ClientPayloadError", "ContentLengthError",
                              "TransferEncodingError"):
        return True  # a body cut short (aiohttp reports it with status 400)
    status = _status(err)
    if status is not None:
        return status >= 500 or status in (408, 429)
    return True  # connection reset, incomplete read, timeout, ...


def describe(err: BaseException) -> str:
    """One line for an object-storage failure, with what to check. Credentials are
    never part of it (the libraries do not put them in error messages)."""
    if isinstance(err, PermissionError):
        return (f"access denied ({_first_line(err)}); check the credentials in the environment "
                "(AWS_ACCESS_KEY_ID/AWS_PROFILE, ~/.aws) and the bucket policy")
    if "Credentials" in type(err).__name__:
        return (f"{type(err).__name__}: {_first_line(err)}; set AWS_ACCESS_KEY_ID/"
                "AWS_SECRET_ACCESS_KEY or AWS_PROFILE (or ~/.aws/credentials)")
    if isinstance(err, HttpStatusError):
        return str(err)
    if isinstance(err, FileNotFoundError):
        text = _first_line(err)
        if "bucket" in text.lower():
            return f"no such bucket ({text})"
        return "no such object"
    return f"{type(err).__name__}: {_first_line(err)}".strip().rstrip(":")


def _first_line(err: BaseException) -> str:
    lines = str(err).strip().splitlines()
    return lines[0] if lines else ""


def remote_error(err: BaseException, url: str, member: Optional[str] = None,
                 retries: int = 0) -> WenetDataError:
    """``err`` as a :class:`WenetDataError` naming ``url`` (and the tar ``member``
    being read), saying how many retries were spent. A killed DataLoader worker's error
    (raised by torch's SIGCHLD handler in the middle of a read) is re-raised as it is:
    it is not this URL's fault (issue 23)."""
    reraise_worker_death(err)
    if isinstance(err, WenetDataError):
        return err
    kind = "missing_file" if isinstance(err, FileNotFoundError) else "io"
    tried = f" (gave up after {retries} retries)" if retries else ""
    return WenetDataError(describe(err) + tried, url, member=member, kind=kind)


class HttpStatusError(OSError):
    """A server answered with a status worth retrying (5xx, 408, 429)."""

    def __init__(self, status: int, reason: str = "") -> None:
        super().__init__(f"HTTP status {status}" + (f" ({reason})" if reason else ""))
        self.status = status


class ResumableReader(io.RawIOBase):
    """A remote object read through :meth:`_open` (a request from byte :attr:`pos`) and
    :meth:`_read`, within :class:`ReadLimits`; transient failures are retried with
    exponential backoff (``backoff_s * 2**k`` seconds, at most ``retries`` times in a
    row, never sleeping past a deadline) and reading continues at the byte offset
    reached. Time limits are final (kind ``"timeout"``). The final error names the URL
    and, when the reader was told (:meth:`watch_member`), the tar member being read.

    Subclasses implement ``_open``, ``_read(n)`` and ``_drop`` (close the request).
    """

    def __init__(self, url: str, limits: ReadLimits) -> None:
        super().__init__()
        self.name = url
        self.pos = 0  # bytes delivered to the caller
        self.num_retries = 0  # reopenings done (for logs and tests)
        self.member: Optional[str] = None
        self.limits = limits
        self.clock = Deadlines(limits)
        self._file = None
        self._call(lambda: None)  # open now: a missing object fails here

    def watch_member(self, member: str, deadline: float) -> None:
        """Reading tar member ``member`` (named in errors) must end by ``deadline``
        (``time.monotonic()`` seconds)."""
        self.member, self.clock.member_end = member, deadline

    def _open(self) -> None:
        raise NotImplementedError

    def _read(self, n: int) -> bytes:
        raise NotImplementedError

    def _drop(self) -> None:
        raise NotImplementedError

    def _timeout(self, message: Optional[str] = None) -> WenetDataError:
        """The error for a passed deadline or, without one, a stall (or ``message``)."""
        return WenetDataError(message or self.clock.stall_message(), self.name,
                              member=self.member, kind="timeout")

    def _wait_s(self) -> float:
        """The longest wait for the next byte; raises once a deadline has passed."""
        passed = self.clock.passed()
        if passed:
            raise self._timeout(passed)
        return self.clock.wait_s()

    def _call(self, fn, *args):
        """``fn(*args)`` with the object open, retried across transient failures."""
        failures = 0
        while True:
            try:
                if self._file is None:
                    self._open()
                return fn(*args)
            except Exception as err:
                if not is_transient(err) or failures >= self.limits.retries:
                    raise remote_error(err, self.name, self.member, failures) from None
                failures += 1
                wait = min(self.limits.backoff_s * 2 ** (failures - 1),
                           max(0.0, self.clock.time_left()))
                logger.warning("%s: %s at byte %d; retrying in %.1f s (%d/%d)", self.name,
                               describe(err), self.pos, wait, failures, self.limits.retries)
                self._drop()
                time.sleep(wait)
                self.num_retries += 1

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        data = self._call(self._read, len(b))
        n = len(data)
        b[:n] = data
        self.pos += n
        return n

    def close(self) -> None:
        if not self.closed:
            self._drop()
            super().close()


class RetryingReader(ResumableReader):
    """An fsspec object (``s3://bucket/key``, ...) read through
    :class:`ResumableReader`'s retries, in range requests of ``block_size`` bytes
    (default :data:`BLOCK_SIZE`). Seekable: a seek moves the next range request (a
    header probe reads a few small ranges, not the whole object).

    Every call into fsspec (open, a range request) runs on a :class:`BoundedCaller`
    and must return within the stall limit and before the deadlines of ``limits``;
    fsspec has no such limits of its own (s3fs retries a stalled request for minutes).

    ``retries``/``backoff`` (seconds), when given, override those of ``limits``
    (default: the ``policy``'s, else :class:`ReadLimits` from the environment); the
    ``policy``'s ``url_protocols`` are allowed besides the defaults.
    """

    def __init__(self, url: str, retries: Optional[int] = None,
                 backoff: Optional[float] = None, block_size: Optional[int] = None,
                 limits: Optional[ReadLimits] = None,
                 policy: Optional[ReadPolicy] = None) -> None:
        policy = policy if policy is not None else ReadPolicy()
        limits = limits if limits is not None else policy.read_limits()
        if retries is not None or backoff is not None:
            limits = dataclasses.replace(
                limits, retries=limits.retries if retries is None else retries,
                backoff_s=limits.backoff_s if backoff is None else backoff)
        self._block_size = block_size or BLOCK_SIZE
        self._fs, self._path = _filesystem(url, policy.url_protocols)
        self._caller = BoundedCaller()
        super().__init__(url, limits)

    def _bounded(self, fn, *args):
        try:
            return self._caller.call(self._wait_s(), fn, *args)
        except TimeoutError:
            self._file = None  # still in use by the call given up on: not reused
            raise self._timeout() from None

    def _open(self) -> None:
        def open_at(pos: int):
            f = self._fs.open(self._path, "rb", block_size=self._block_size,
                              cache_type="readahead")
            if pos:
                f.seek(pos)
            return f

        self._file = self._bounded(open_at, self.pos)

    def _drop(self) -> None:
        if self._file is not None:
            try:
                self._file.close()
            except Exception:  # a broken connection may fail to close; it is dropped
                pass
            self._file = None

    def _read(self, n: int) -> bytes:
        return self._bounded(self._file.read, n)

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_CUR:
            offset += self.pos
        elif whence == io.SEEK_END:
            offset += self._call(lambda: self._file.size)
        self.pos = max(0, int(offset))
        if self._file is not None:
            self._file.seek(self.pos)
        return self.pos

    def close(self) -> None:
        super().close()
        self._caller.close()


def open_remote(url: str, limits: Optional[ReadLimits] = None, *,
                policy: Optional[ReadPolicy] = None) -> BinaryIO:
    """Open an object-storage URL for sequential binary reading (see module doc),
    within ``limits`` (default: the ``policy``'s, else :class:`ReadLimits` from the
    environment); the ``policy``'s ``url_protocols`` are allowed too."""
    reader = RetryingReader(url, limits=limits, policy=policy)
    return io.BufferedReader(reader, buffer_size=1 << 16)


@contextmanager
def remote_output(url: str, mode: str = "wb") -> Iterator[BinaryIO]:
    """Write an object; it appears only if the block exits without error."""
    fs, path = _filesystem(url)
    try:
        f = fs.open(path, mode.replace("t", "").replace("b", "") + "b",
                    block_size=max(BLOCK_SIZE, 5 << 20))
    except Exception as err:
        raise remote_error(err, url) from None
    stream = io.TextIOWrapper(f, encoding="utf-8") if "b" not in mode else f
    try:
        yield stream
    except BaseException:
        discard = getattr(f, "discard", None)
        if discard is not None:
            discard()  # abort the multipart upload; nothing becomes visible
            f.closed = True  # so that garbage collection does not upload it after all
        raise
    try:
        if stream is not f:
            stream.flush()
            stream.detach()
        f.close()
    except Exception as err:
        raise remote_error(err, url) from None


def remote_exists(url: str) -> bool:
    fs, path = _filesystem(url)
    try:
        return fs.exists(path)
    except Exception as err:
        raise remote_error(err, url) from None


def remote_put(local_path: str, url: str) -> None:
    """Upload a local file to ``url`` (appears whole, or not at all)."""
    fs, path = _filesystem(url)
    try:
        fs.put_file(local_path, path)
    except Exception as err:
        raise remote_error(err, url) from None


def remote_ls(url: str) -> List[str]:
    """URLs of the objects directly under "directory" ``url``, sorted ([] if none)."""
    fs, path = _filesystem(url)
    try:
        found = fs.ls(path.rstrip("/"), detail=True)
    except FileNotFoundError:
        return []
    except Exception as err:
        raise remote_error(err, url) from None
    return sorted(fs.unstrip_protocol(d["name"]) for d in found if d.get("type") == "file")


def remote_glob(url: str, pattern: str) -> List[str]:
    """URLs of the objects under directory ``url`` whose names match ``pattern``
    (a glob, e.g. ``"cuts.*.jsonl.gz"``), sorted."""
    fs, path = _filesystem(url)
    try:
        found = fs.glob(path.rstrip("/") + "/" + pattern)
    except Exception as err:
        raise remote_error(err, url) from None
    return sorted(fs.unstrip_protocol(p) for p in found)
