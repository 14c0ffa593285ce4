"""Lines read with a length limit: no list, manifest or text source line is ever held
whole when it is longer than :func:`max_line_bytes` bytes.

``for line in f`` holds a whole line in memory: a 10 GB sparse raw list (4 KB on disk)
or a 6 MB ``.gz`` holding one 6 GB line is one line, and reading it ends in
``MemoryError`` (also in fault-tolerant mode). :func:`bounded_lines` reads at most
``limit + 1`` bytes of a line; a longer one is a :class:`~wenet_lhotse.errors.
WenetDataError` (kind ``"too_long"``) naming the file, the line and the limit and how to
raise it. Handed to ``on_too_long`` (fault-tolerant readers record it and go on), the
rest of that line is read past in pieces of at most ``limit`` bytes, never kept.
"""

from __future__ import annotations

import io
import os
from typing import Callable, Iterator, Optional, Tuple, Union

from wenet_lhotse.errors import WenetDataError

#: Longest line read (bytes, line ending excluded): 16 MiB, far above any list or
#: manifest line (a cut with alignments is kilobytes); ``lhotse_conf.max_line_bytes``
#: or ``$WENET_LHOTSE_MAX_LINE_BYTES`` changes it.
DEFAULT_MAX_LINE_BYTES = 16 << 20

#: How the limit is raised, named in every error.
RAISE_HOW = "lhotse_conf.max_line_bytes or $WENET_LHOTSE_MAX_LINE_BYTES raises it"


def max_line_bytes(value: Optional[int] = None) -> int:
    """``value``, else ``$WENET_LHOTSE_MAX_LINE_BYTES``, else the default (bytes)."""
    if value is not None:
        return int(value)
    env = os.environ.get("WENET_LHOTSE_MAX_LINE_BYTES")
    if not env:
        return DEFAULT_MAX_LINE_BYTES
    if not env.isdigit() or int(env) < 1:
        raise ValueError(f"$WENET_LHOTSE_MAX_LINE_BYTES={env!r} is not a byte count >= 1")
    return int(env)


def too_long(source: str, line: int, limit: int) -> WenetDataError:
    """The one-line error of a line over ``limit`` bytes."""
    return WenetDataError(f"line longer than the limit of {limit} bytes ({RAISE_HOW})",
                          source, line=line, kind="too_long")


Line = Union[bytes, str]


def bounded_lines(f, source: str, limit: Optional[int] = None,
                  on_too_long: Optional[Callable[[WenetDataError], None]] = None,
                  start: int = 1) -> Iterator[Tuple[int, Line]]:
    """``(line number, line)`` of the open file ``f`` (binary or text; numbers from
    ``start``), each line with its ending as ``f.readline`` gives it. A line longer than
    ``limit`` (bytes, or characters for a text file; default :func:`max_line_bytes`)
    raises :func:`too_long`, or, given ``on_too_long``, is passed to it and read past
    (memory: at most ``limit`` bytes at any time)."""
    limit = max_line_bytes(limit)
    n = start - 1
    while True:
        line = f.readline(limit + 1)
        if not line:
            return
        n += 1
        nl = b"\n" if isinstance(line, bytes) else "\n"
        if len(line) > limit and not line.endswith(nl):
            err = too_long(source, n, limit)
            if on_too_long is None:
                raise err
            line = None  # the part read is not kept while the rest is read past
            _read_past(f, nl, limit)
            on_too_long(err)
            continue
        yield n, line


#: Bytes read at a time when a plain local file's long line is read past.
_CHUNK = 1 << 20


def _read_past(f, nl: Line, limit: int) -> None:
    """Read the rest of a line: a local file in 1 MiB pieces, seeking back to the byte
    after the newline (a buffered reader's ``readline(n)`` is slow on a line of
    gigabytes); anything else (gzip, network, text) with ``readline(limit)``."""
    if isinstance(f, (io.BufferedReader, io.FileIO)) and f.seekable():
        while True:
            piece = f.read(_CHUNK)
            if not piece:
                return
            i = piece.find(b"\n")
            if i >= 0:
                f.seek(i + 1 - len(piece), io.SEEK_CUR)
                return
    while True:
        piece = f.readline(limit)
        if not piece or piece.endswith(nl):
            return
