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

:class:`RetryingReader` runs the retry-and-resume loop of :mod:`.resumable` (which
failures are transient, backoff, resuming at the byte offset, the final one-line
errors) over fsspec; :class:`~wenet_lhotse.io.http_reader.HttpReader` runs it over urllib3.
``http(s)://`` stays with :mod:`wenet_lhotse.io.http_reader` for WeNet inputs
(WeNet's semantics).
"""

from __future__ import annotations

import dataclasses
import io
import re
from contextlib import contextmanager
from typing import BinaryIO, Iterable, Iterator, List, Optional

from wenet_lhotse.errors import WenetDataError
from wenet_lhotse.io.access import check_url
from wenet_lhotse.io.policy import ReadPolicy
from wenet_lhotse.io.read_limits import (
    BoundedCaller,
)
from wenet_lhotse.io.resumable import (
    ResumableReader,
    remote_error,
)

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
                 policy: Optional[ReadPolicy] = None) -> None:
        policy = policy if policy is not None else ReadPolicy()
        limits = policy.read_limits()
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


class RangeGetReader(RetryingReader):
    """A :class:`RetryingReader` for a caller that knows the ranges it needs: each read
    of ``n`` bytes is one ranged GET of exactly those bytes (fsspec's ``cat_file``),
    from byte ``start`` on. No HEAD request and no read-ahead copy per open (on S3 an
    open costs a HEAD, and its read-ahead buffer copies every byte once more): half the
    CPU of a buffered file for the spool's 32 MiB pieces (``bench/s3_window.py``). A
    missing object fails at the first read; a range past the object's end reads short,
    and one that starts past it reads nothing (a tar cut since it was indexed)."""

    def __init__(self, url: str, start: int = 0, policy: Optional[ReadPolicy] = None
                 ) -> None:
        super().__init__(url, policy=policy)
        self.pos = start

    def _open(self) -> None:
        self._file = self._fs  # nothing held open between reads

    def _read(self, n: int) -> bytes:
        try:
            return self._bounded(lambda: self._fs.cat_file(self._path, start=self.pos,
                                                         end=self.pos + n))
        except OSError as err:
            if _past_the_end(err):  # the object ends before ``pos``: read as its end
                return b""
            raise

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence != io.SEEK_SET:
            raise io.UnsupportedOperation("a RangeGetReader seeks to absolute offsets")
        self.pos = max(0, int(offset))
        return self.pos


def _past_the_end(err: BaseException) -> bool:
    """A range request that starts past the object's end (HTTP 416; S3's
    ``InvalidRange``, which s3fs raises as ``EINVAL``)."""
    cause = err.__cause__
    code = getattr(cause, "response", {}).get("Error", {}).get("Code") if cause else None
    return code == "InvalidRange" or getattr(err, "status", None) == 416 or (
        "range is not satisfiable" in str(err).lower())


def open_remote(url: str, *, policy: Optional[ReadPolicy] = None) -> BinaryIO:
    """Open an object-storage URL for sequential binary reading (see module doc),
    within the ``policy``'s ``limits`` (default: :class:`ReadLimits` from the
    environment); the ``policy``'s ``url_protocols`` are allowed too."""
    reader = RetryingReader(url, policy=policy)
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
