"""What kind of input a path is: the one detector and the one kind table.

The kind is told from the content, never from the name alone: a directory with
``cuts.*.jsonl*`` is Lhotse Shar; a JSON-lines file whose first record has ``"key"``
is a WeNet raw list, one with ``"id"`` (and no ``"key"``) a Lhotse cuts manifest; a
gzipped file that is not JSON lines a manifest too; a text file whose first line is a
tar path, a URL or ``pipe:`` a WeNet shard list. Any other text file is not an input
(a notes file is never taken for a list of commands). An empty file is an (empty)
raw list.
"""

from __future__ import annotations

import codecs
import gzip
import json
import os
import re
from pathlib import Path
from typing import Dict, Optional, Tuple

from lhotse.utils import Pathlike

from wenet_lhotse.errors import WenetDataError
from wenet_lhotse.io.remote import is_remote, open_remote
from wenet_lhotse.sources.shar_dir import is_shar_dir

#: Every input kind, and what it is.
KINDS: Dict[str, str] = {
    "raw": "WeNet raw data.list (JSON lines with key, wav, txt)",
    "shard": "WeNet shard list (one tar path, URL or pipe: per line)",
    "cuts": "Lhotse cuts manifest (cuts.jsonl / cuts.jsonl.gz)",
    "shar": "Lhotse Shar directory (cuts.*.jsonl.gz + recording.*.tar)",
}
#: The kinds WeNet itself reads (its ``data_type``).
WENET_KINDS = ("raw", "shard")
#: Kinds that can only be read as a stream of tars.
STREAMED_KINDS = ("shard",)


#: What a shard list line ends with (any compression ``tarfile`` reads).
TAR_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz")
_URL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")


def looks_like_shard_line(line: str) -> bool:
    """A tar path (``*.tar``, ``*.tar.gz``, ... or an existing file), a URL or ``pipe:``."""
    return (line.startswith("pipe:") or bool(_URL.match(line))
            or line.lower().endswith(TAR_SUFFIXES) or os.path.isfile(line))


def _first_line(path: Path) -> Tuple[int, str]:
    """``(1-based number, stripped text)`` of the first non-empty line; ``(0, "")``."""
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8", errors="replace") as f:
            for no, line in enumerate(f, 1):
                line = line.lstrip("\ufeff").strip()  # a UTF-8 BOM is not whitespace
                if line:
                    return no, line
    except (OSError, EOFError) as err:
        raise WenetDataError(f"cannot read: {err}", str(path), kind="io") from err
    return 0, ""


def detect_input_kind(path: Pathlike, wenet_only: bool = False) -> str:
    """One of :data:`KINDS` for ``path`` (see the module doc). Raises
    :class:`WenetDataError` for a missing path, and with ``wenet_only`` for anything
    but a WeNet list (``raw``/``shard``)."""
    kind = _detect_remote(str(path)) if is_remote(str(path)) else _detect(Path(path))
    if wenet_only and kind not in WENET_KINDS:
        raise WenetDataError(f"expected a WeNet data.list, found a Lhotse {kind} input",
                             str(path), kind="format")
    return kind


def _detect_remote(url: str) -> str:
    """The same rules for an object-store URL: a prefix holding ``cuts.*.jsonl*`` is
    Shar, else the object's first line decides."""
    if is_shar_dir(url):
        return "shar"
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
            line = next((ln for ln in (x.lstrip(codecs.BOM_UTF8).strip() for x in stream)
                         if ln), b"").decode("utf-8", "replace")
        except (OSError, EOFError) as err:
            raise WenetDataError(f"cannot read: {err}", url, kind="io") from None
    return _kind_of_line(line, gz, url)


def _detect(p: Path) -> str:
    if p.is_dir():
        if not is_shar_dir(p):
            raise WenetDataError("directory without cuts.*.jsonl.gz: not a Lhotse Shar "
                                 "directory", str(p), kind="format")
        return "shar"
    if not p.exists():
        raise WenetDataError("no such file or directory", str(p), kind="missing_file")
    no, line = _first_line(p)
    return _kind_of_line(line, p.suffix == ".gz", str(p), no)


def _kind_of_line(line: str, gz: bool, where: str, no: Optional[int] = None) -> str:
    """The kind of a list/manifest from its first non-empty line (number ``no``)."""
    if not line:
        return "raw"  # an empty list
    if line.startswith("{"):
        try:
            obj = json.loads(line)
        except (json.JSONDecodeError, RecursionError):
            return "raw"  # a WeNet list with a bad first line: its reader names the line
        if isinstance(obj, dict) and "key" not in obj and "id" in obj:
            return "cuts"
        return "raw"
    if gz:
        return "cuts"
    if not looks_like_shard_line(line):
        raise WenetDataError(
            f"not an input: its first line {line[:40]!r} is neither JSON (a raw list or "
            "manifest) nor a tar path or URL (a shard list)", where, line=no, kind="format")
    return "shard"


def detect_data_type(path: Pathlike) -> str:
    """WeNet's ``data_type`` of a list file: ``"raw"`` or ``"shard"``."""
    return detect_input_kind(path, wenet_only=True)


#: The loader's name for the same detector.
detect_source_type = detect_input_kind
