"""``http(s)://`` inputs (WeNet shard lists may list URLs): a streamed GET through
urllib3, with the retries of :class:`~wenet_lhotse.io.resumable.ResumableReader`
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
  (kind ``"io"``; 404 and 410 are kind ``"missing_file"``), and is counted like any
  skip in fault-tolerant mode.
* With ``block_size`` (header probes of audio files) the reader is seekable and asks
  for ``Range: bytes=N-(N+block_size-1)``, one block at a time, so a probe reads a few
  small ranges rather than the file; :attr:`HttpReader.size` is then the object's
  size, or None when the server ignores range requests (it answered 200 with the
  whole object, which is then read front to back).

WeNet pipes URLs through ``wget -O -``; here they are streamed in-process with the
status checked, no command run.
"""

from __future__ import annotations

import io
from typing import Optional

from wenet_lhotse.errors import WenetDataError
from wenet_lhotse.io.read_limits import ReadLimits
from wenet_lhotse.io.resumable import HttpStatusError, ResumableReader

__all__ = ["HttpReader", "ReadLimits"]


class HttpReader(ResumableReader):
    """One URL read within :class:`ReadLimits` (see the module doc): front to back,
    or in ranges of ``block_size`` bytes (seekable)."""

    def __init__(self, url: str, limits: ReadLimits, block_size: Optional[int] = None) -> None:
        import urllib3

        # A pool per stream: nothing shared across forked DataLoader workers. No
        # urllib3 retries: ours resume at the offset reached.
        self._pool = urllib3.PoolManager()
        self._block_size = block_size
        self._block = (0, b"")  # (first byte, bytes): the last range fetched
        self.size: Optional[int] = None  # bytes, when the server said
        super().__init__(url, limits)

    def _open(self) -> None:
        import urllib3

        wait = self._wait_s()
        first, cached = self._block
        if self._block_size and (first <= self.pos < first + len(cached) or
                                 self.size is not None and self.pos >= self.size):
            self._file = io.BytesIO(cached[self.pos - first:])  # no request needed
            return
        if self._block_size:
            headers = {"Range": f"bytes={self.pos}-{self.pos + self._block_size - 1}"}
        else:
            headers = {"Range": f"bytes={self.pos}-"} if self.pos else {}
        try:
            resp = self._pool.request(
                "GET", self.name, headers=headers, preload_content=False, retries=False,
                timeout=urllib3.Timeout(connect=wait, read=wait))
        except urllib3.exceptions.ReadTimeoutError as e:  # connected, no answer
            raise self._timeout() from e
        status = resp.status
        if status == 200 and not self.pos or status == 206 and self._resumes_here(resp):
            self._file = resp
            total = resp.headers.get("Content-Range", "").rpartition("/")[2]
            if status == 206 and total.isdigit():
                self.size = int(total)
                if self._block_size:  # kept: a header probe seeks back and forth
                    try:
                        self._block = (self.pos, resp.read())
                    except urllib3.exceptions.ReadTimeoutError as e:
                        raise self._timeout() from e
                    self._drop()
                    self._file = io.BytesIO(self._block[1])
            elif status == 200:
                length = resp.headers.get("Content-Length", "")
                self.size = int(length) if length.isdigit() else None
                self._block_size = None  # no ranges: the whole object, front to back
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
        if status in (404, 410):
            raise WenetDataError(f"HTTP status {status} (no such object)", self.name,
                                 member=self.member, kind="missing_file")
        raise WenetDataError(f"HTTP status {status}", self.name, member=self.member,
                             kind="io")

    def _resumes_here(self, resp) -> bool:
        """A 206 whose ``Content-Range`` starts at :attr:`pos`."""
        first = resp.headers.get("Content-Range", "").replace("bytes", "").strip()
        return first.split("-", 1)[0].strip() == str(self.pos)

    def _read(self, n: int) -> bytes:
        data = self._read1(n)
        if not data and self._block_size and self.size is not None and self.pos < self.size:
            self._drop()  # this block is done: the next one
            self._open()
            data = self._read1(n)
        return data

    def _read1(self, n: int) -> bytes:
        import urllib3

        wait = self._wait_s()
        sock = getattr(getattr(self._file, "_connection", None), "sock", None)
        if sock is not None:  # never wait past a deadline
            sock.settimeout(wait)
        try:
            return self._file.read1(n)
        except (urllib3.exceptions.ReadTimeoutError, TimeoutError) as e:
            raise self._timeout() from e

    def _drop(self) -> None:
        f, self._file = self._file, None
        if f is None:
            return
        try:
            if getattr(f, "length_remaining", None) != 0:
                f.close()  # a connection mid-response cannot be reused
            f.release_conn()
        except Exception:  # a broken connection may fail to close; it is dropped
            pass

    def seekable(self) -> bool:
        return bool(self._block_size)

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if not self._block_size:
            raise io.UnsupportedOperation("seek")
        if whence == io.SEEK_CUR:
            offset += self.pos
        elif whence == io.SEEK_END:
            if self.size is None:
                raise io.UnsupportedOperation("the server did not say the object's size")
            offset += self.size
        if int(offset) != self.pos:
            self._drop()
            self.pos = max(0, int(offset))
        return self.pos
