"""What may be opened at all, before any byte is read: ``pipe:`` commands, URL
protocols and local files that are not regular files.

* ``pipe:`` inputs run a shell command: only with an explicit opt-in
  (:data:`PIPE_REFUSED`); WeNet has no ``pipe:`` at all.
* URLs are read only through the protocols of :data:`DEFAULT_URL_PROTOCOLS`
  (:func:`url_problem`): fsspec's archive and cache filesystems (``tar://m::x.tar``,
  ``zip://``, ``simplecache::``) would read around the tar member checks, and
  ``ftp://`` reaches any host and port. ``$WENET_LHOTSE_URL_PROTOCOLS`` (comma
  separated) and a reader's policy (``ReadPolicy.url_protocols``, from
  ``lhotse_conf.url_protocols``) add protocols; the token ``::`` allows chained URLs.
  Lhotse's IO backend opens audio URLs later, with no policy at hand: it allows what
  a reader's policy lent it (:func:`lend_url_protocols`, per process).
* local inputs must be regular files (:func:`open_regular`): a FIFO named ``x.tar``
  would block ``open()`` forever, a device (``/dev/zero``) never ends.
"""

from __future__ import annotations

import os
import re
import stat
from typing import BinaryIO, Iterable, Optional

from wenet_lhotse.errors import WenetDataError

#: Why a ``pipe:`` input was not run (one line; the CLI, Python and yaml spellings).
PIPE_REFUSED = ("'pipe:' runs a shell command; commands from data run only when allowed "
                "(--allow-pipe on the CLI, ReadPolicy(allow_pipe=True) in Python, "
                "lhotse_conf.allow_pipe in yaml)")


#: URL protocols read by default: local files, WeNet's http(s), object storage.
DEFAULT_URL_PROTOCOLS = frozenset({"file", "http", "https", "s3", "s3a", "gs", "gcs", "az",
                                   "abfs", "abfss", "adl", "hdfs", "webhdfs"})

_URL = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://")


def allowed_url_protocols(extra: Optional[Iterable[str]] = None) -> frozenset:
    """:data:`DEFAULT_URL_PROTOCOLS` plus ``$WENET_LHOTSE_URL_PROTOCOLS``'s and
    ``extra`` (a policy's ``url_protocols``; the token ``::`` allows chained URLs)."""
    env = os.environ.get("WENET_LHOTSE_URL_PROTOCOLS", "")
    added = [p.strip().lower() for p in env.split(",")] + [str(p).lower() for p in extra or ()]
    return DEFAULT_URL_PROTOCOLS | {p for p in added if p}


#: Protocols a reader's policy allowed for the audio URLs it handed to Lhotse, which
#: opens them later through :mod:`~wenet_lhotse.io.lhotse_io` with no policy at hand
#: (this process only; a forked DataLoader worker inherits it).
_LENT: set = set()


def lend_url_protocols(protocols: Iterable[str]) -> None:
    """Let Lhotse's IO backend open audio URLs of ``protocols`` in this process."""
    _LENT.update(str(p).lower() for p in protocols)


def lent_url_protocols() -> frozenset:
    """The protocols :func:`lend_url_protocols` allowed."""
    return frozenset(_LENT)


def url_problem(url: str, extra: Optional[Iterable[str]] = None) -> Optional[str]:
    """Why ``url`` is not read (a protocol outside the allow-list, or a chained
    ``a::b`` URL), or None; a plain path or ``pipe:`` command is not a URL: None.
    ``extra``: protocols allowed besides :func:`allowed_url_protocols`' defaults."""
    parts = str(url).split("::")
    if not any(_URL.match(part) for part in parts):
        return None
    allowed = allowed_url_protocols(extra)
    hint = "(allowed: " + ", ".join(sorted(allowed - {"::"})) + \
        "; lhotse_conf.url_protocols or WENET_LHOTSE_URL_PROTOCOLS add more)"
    if "::" in str(url) and "::" not in allowed:
        return ("chained '::' URLs read around the tar member checks: refused unless "
                "lhotse_conf.url_protocols or WENET_LHOTSE_URL_PROTOCOLS holds '::'")
    for part in parts:
        pm = _URL.match(part)
        if pm is not None and pm.group(1).lower() not in allowed:
            return f"URL protocol {pm.group(1)!r} is not allowed {hint}"
    return None


def check_url(url: str, source: Optional[str] = None, line: Optional[int] = None,
              extra: Optional[Iterable[str]] = None) -> None:
    """Raise :class:`WenetDataError` (kind ``"refused"``) when :func:`url_problem`."""
    why = url_problem(url, extra)
    if why is not None:
        raise WenetDataError(f"{short(str(url), 80)}: {why}", source or str(url)[:200],
                             line=line, kind="refused")



def short(s: str, n: int = 60) -> str:
    """``repr(s)``, cut to ``n`` characters."""
    r = repr(s)
    return r if len(r) <= n else r[: n - 5] + "...'"



def open_regular(path: str, name: Optional[str] = None) -> BinaryIO:
    """``open(path, "rb")`` of a regular file only: opened non-blocking (a FIFO would
    block ``open()`` until a writer comes), checked with ``fstat`` (no race with a
    rename), then switched back to blocking reads. A FIFO, device, socket or directory
    is a :class:`WenetDataError` (kind ``"io"``) naming ``name`` (default ``path``);
    the ``OSError`` of ``open`` propagates as is."""
    import fcntl

    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            what = ("a FIFO" if stat.S_ISFIFO(mode) else "a directory" if stat.S_ISDIR(mode)
                    else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
                    else "a socket" if stat.S_ISSOCK(mode) else "not a regular file")
            raise WenetDataError(f"{what}, not a regular file: refused (reading it could "
                                 "block or never end)", name or path, kind="io")
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
