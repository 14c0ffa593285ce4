"""What detection reads of an input: :class:`FirstLine` (a file's first non-empty line)
and the verdicts a kind's ``sniff`` gives (:data:`SURE`, :data:`MAYBE`, :data:`NO`).

The kind is told from the content, never from the name alone (see
:func:`~wenet_lhotse.sources.registry.detect`). Reading stops at the first non-empty
line; a UTF-8 BOM is not content; a gzip file is read through its compression.
"""

from __future__ import annotations

import codecs
import gzip
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Optional

from wenet_lhotse.errors import WenetDataError
from wenet_lhotse.io.lines import bounded_lines
from wenet_lhotse.io.remote import open_remote

#: ``InputKind.sniff`` answers: certainly mine, possibly mine (a fallback), not mine.
SURE, MAYBE, NO = 2, 1, 0

#: What a shard list line ends with (any compression ``tarfile`` reads).
TAR_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz")
_URL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")
_NOT_JSON = object()


def looks_like_shard_line(line: str) -> bool:
    """A tar path (``*.tar``, ``*.tar.gz``, ... or an existing file), a URL or ``pipe:``."""
    return (line.startswith("pipe:") or bool(_URL.match(line))
            or line.lower().endswith(TAR_SUFFIXES) or os.path.isfile(line))


@dataclass(frozen=True)
class FirstLine:
    """A file's first non-empty line, as detection sees it.

    :param line: the stripped text (``""``: an empty file).
    :param gz: the file is gzip-compressed.
    :param where: the path or URL (for errors).
    :param no: the line's 1-based number (``None`` for a remote object).
    """

    line: str
    gz: bool
    where: str
    no: Optional[int] = None

    @property
    def is_json(self) -> bool:
        """The line opens a JSON object (it may still be invalid JSON)."""
        return self.line.startswith("{")

    @property
    def record(self) -> Optional[Dict[str, Any]]:
        """The line as a JSON object, or ``None`` (not JSON, invalid, or not an object)."""
        obj = _parse(self.line) if self.is_json else _NOT_JSON
        return obj if isinstance(obj, dict) else None


def _parse(line: str) -> Any:
    try:
        return json.loads(line)
    except (json.JSONDecodeError, RecursionError):
        return _NOT_JSON


def local_first_line(path: Path) -> FirstLine:
    """The first non-empty line of a local file (``.gz``: decompressed)."""
    gz = path.suffix == ".gz"
    opener = gzip.open if gz else open
    try:
        with opener(path, "rt", encoding="utf-8", errors="replace") as f:
            for no, line in bounded_lines(f, str(path)):  # a too long line: one error
                line = line.lstrip("\ufeff").strip()  # a UTF-8 BOM is not whitespace
                if line:
                    return FirstLine(line, gz, str(path), no)
    except (OSError, EOFError) as err:
        raise WenetDataError(f"cannot read: {err}", str(path), kind="io") from err
    return FirstLine("", gz, str(path), 0)


def remote_first_line(url: str) -> FirstLine:
    """The first non-empty line of an object-store object (gzip told by its magic)."""
    try:
        f = open_remote(url)
    except WenetDataError as err:
        if err.kind == "missing_file":
            raise WenetDataError("no such object or Shar prefix", url,
                                 kind="missing_file") from None
        raise
    with f:
        gz = f.peek(2)[:2] == b"\x1f\x8b"
        stream = gzip.GzipFile(fileobj=f) if gz else f
        try:
            line = next((ln for ln in (x.lstrip(codecs.BOM_UTF8).strip()
                                       for _, x in bounded_lines(stream, url)) if ln),
                        b"").decode("utf-8", "replace")
        except (OSError, EOFError) as err:
            raise WenetDataError(f"cannot read: {err}", url, kind="io") from None
    return FirstLine(line, gz, url)
