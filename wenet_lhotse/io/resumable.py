"""A remote read that survives a dropped connection: which failures are worth a retry,
and :class:`ResumableReader`, the retry-and-resume loop every network reader runs
(:class:`~wenet_lhotse.io.remote.RetryingReader` over fsspec,
:class:`~wenet_lhotse.io.http_reader.HttpReader` over urllib3).

A transient failure (:func:`is_transient`: connection reset or body cut short,
timeout, HTTP 5xx, 408, 429) is retried with exponential backoff, at most
``ReadLimits.retries`` times in a row, never sleeping past a deadline; the object is
reopened *at the byte offset already handed to the reader*, so a blip loses nothing
and no byte is delivered twice. A permanent failure (no such object or bucket, access
denied, bad arguments, bad data, a killed DataLoader worker's error) is not retried.
The final error is a :class:`~wenet_lhotse.errors.WenetDataError` (:func:`remote_error`:
kind ``"missing_file"``, ``"io"``, or ``"timeout"`` for a passed
:class:`~wenet_lhotse.io.read_limits.ReadLimits` deadline or stall) naming the URL,
the tar member being read and the retries spent, in one line (:func:`describe`) that
says what to check and never holds credentials. WeNet's readers do not retry; Lhotse's
(``smart_open``) cannot resume at an offset.
"""

from __future__ import annotations

import io
import logging
import time
from typing import Optional

from wenet_lhotse.errors import WenetDataError, is_worker_death, reraise_worker_death
from wenet_lhotse.io.read_limits import Deadlines, ReadLimits

logger = logging.getLogger(__name__)


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
