"""``http(s)://`` inputs (WeNet shard lists may list URLs): a streamed GET through
urllib3, with the retries of :class:`~wenet_lhotse.formats.remote.ResumableReader`
and the time limits of :class:`ReadLimits`.

* A transient failure (connection refused, reset or cut short, a response shorter
  than its ``Content-Length``, HTTP 5xx, 408 or 429) is retried with exponential
  backoff; reading continues at the byte offset reached with a ``Range: bytes=N-``
  request, so a dropped connection mid-tar loses nothing and repeats nothing. A
  server that answers such a request with the whole object (200: no range support)
  ends the read with an error saying so (kind ``"truncated"``): the tar cannot be
  resumed and is not restarted, since what was read has been handed on already.
* Time limits are final, not retried: no byte for ``stall_s`` seconds, the whole
  response (all attempts) not done within ``deadline_s``, or one tar member not read
  within ``member_deadline_s`` is an error of kind ``"timeout"``; a backoff never
  sleeps past the deadline.
* A failure that outlasts the retries names the URL and the member being read
  (kind ``"io"``), and is counted like any skip in fault-tolerant mode.

WeNet pipes URLs through ``wget -O -``; here they are streamed in-process with the
status checked, no command run.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Optional

from wenet_lhotse.errors import WenetDataError
from wenet_lhotse.formats import remote
from wenet_lhotse.formats.remote import HttpStatusError, ResumableReader


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
    """Time limits (seconds) and retries of network reads. Defaults come from the
    environment when the object is made (``WENET_LHOTSE_HTTP_STALL_S``,
    ``WENET_LHOTSE_HTTP_DEADLINE_S``, ``WENET_LHOTSE_MEMBER_DEADLINE_S``,
    ``WENET_LHOTSE_RETRIES``, ``WENET_LHOTSE_RETRY_BACKOFF_S``), so DataLoader workers
    and CLI runs see them.

    :param stall_s: longest wait for any byte (connect or read); default 60.
    :param deadline_s: longest time for one whole response (one tar); default 3600.
    :param member_deadline_s: longest time to read one tar member; default 600.
    :param retries: consecutive transient failures retried (HTTP and object storage);
        default 5.
    :param backoff_s: first wait between retries, doubled each time; default 0.5.
    """

    stall_s: float = field(
        default_factory=lambda: _env_seconds("WENET_LHOTSE_HTTP_STALL_S", 60.0))
    deadline_s: float = field(
        default_factory=lambda: _env_seconds("WENET_LHOTSE_HTTP_DEADLINE_S", 3600.0))
    member_deadline_s: float = field(
        default_factory=lambda: _env_seconds("WENET_LHOTSE_MEMBER_DEADLINE_S", 600.0))
    retries: int = field(default_factory=remote.default_retries)
    backoff_s: float = field(default_factory=remote.default_backoff)


class HttpReader(ResumableReader):
    """One URL read front to back within :class:`ReadLimits` (see the module doc)."""

    def __init__(self, url: str, limits: ReadLimits) -> None:
        self.limits = limits
        self._deadline = time.monotonic() + limits.deadline_s
        self._member_deadline = float("inf")
        super().__init__(url, limits.retries, limits.backoff_s)

    def watch_member(self, member: str, deadline: float) -> None:
        """Reading ``member`` must end by ``deadline`` (``time.monotonic()`` seconds)."""
        self.member, self._member_deadline = member, deadline

    def _time_left(self) -> float:
        return min(self._deadline, self._member_deadline) - time.monotonic()

    def _timeout_error(self, now: float) -> Optional[WenetDataError]:
        if now >= self._deadline:
            msg = (f"download not finished within its {self.limits.deadline_s:g} s deadline "
                   "(WENET_LHOTSE_HTTP_DEADLINE_S)")
        elif now >= self._member_deadline:
            msg = (f"member not read within {self.limits.member_deadline_s:g} s "
                   "(WENET_LHOTSE_MEMBER_DEADLINE_S)")
        else:
            return None
        return WenetDataError(msg, self.name, member=self.member, kind="timeout")

    def _wait_s(self, now: float) -> float:
        """The longest wait for the next byte: the stall limit, never past a deadline."""
        err = self._timeout_error(now)
        if err is not None:
            raise err
        return max(0.01, min(self.limits.stall_s, self._deadline - now,
                             self._member_deadline - now))

    def _open(self) -> None:
        import urllib3

        wait = self._wait_s(time.monotonic())
        headers = {"Range": f"bytes={self.pos}-"} if self.pos else {}
        # A pool per stream: nothing shared across forked DataLoader workers. No
        # urllib3 retries: ours resume at the offset reached.
        try:
            resp = urllib3.PoolManager().request(
                "GET", self.name, headers=headers, preload_content=False, retries=False,
                timeout=urllib3.Timeout(connect=wait, read=wait))
        except urllib3.exceptions.ReadTimeoutError as e:  # connected, no answer
            raise self._stalled() from e
        status = resp.status
        if status == 200 and not self.pos or status == 206 and self._resumes_here(resp):
            self._file = resp
            return
        resp.release_conn()
        if status >= 500 or status in (408, 429):
            raise HttpStatusError(status, resp.reason or "")
        if status in (200, 206) and self.pos:
            raise WenetDataError(
                f"the connection was lost at byte {self.pos} and the server does not "
                f"support range requests (answered {status} to 'Range: bytes={self.pos}-'), "
                "so the download cannot resume", self.name, member=self.member,
                kind="truncated")
        raise WenetDataError(f"HTTP status {status}", self.name, member=self.member,
                             kind="io")

    def _resumes_here(self, resp) -> bool:
        """A 206 whose ``Content-Range`` starts at :attr:`pos`."""
        first = resp.headers.get("Content-Range", "").replace("bytes", "").strip()
        return first.split("-", 1)[0].strip() == str(self.pos)

    def _read(self, n: int) -> bytes:
        import urllib3

        now = time.monotonic()
        wait = self._wait_s(now)
        sock = getattr(getattr(self._file, "_connection", None), "sock", None)
        if sock is not None:  # never wait past a deadline
            sock.settimeout(wait)
        try:
            return self._file.read1(n)
        except (urllib3.exceptions.ReadTimeoutError, TimeoutError) as e:
            raise self._stalled() from e

    def _stalled(self) -> WenetDataError:
        return self._timeout_error(time.monotonic()) or WenetDataError(
            f"no data for {self.limits.stall_s:g} s (WENET_LHOTSE_HTTP_STALL_S)",
            self.name, member=self.member, kind="timeout")

    def _drop(self) -> None:
        if self._file is not None:
            try:
                self._file.close()
                self._file.release_conn()
            except Exception:  # a broken connection may fail to close; it is dropped
                pass
            self._file = None
