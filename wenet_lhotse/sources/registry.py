"""The one place input kinds are registered, and the questions asked of all of them.

Each kind is a module under :mod:`wenet_lhotse.sources.kinds` defining ``KIND`` (an
:class:`~wenet_lhotse.sources.kinds.base.InputKind`); :data:`KIND_MODULES` lists them,
one line each, in registration order, which breaks detection ties. Adding a kind is its
module plus its line here (docs/architecture.md, "To add an input kind").

:func:`detect` tells a path's kind from its content, never from its name alone: a
directory (or object-store prefix) is asked of every kind (``sniff_dir``); a local
file's first bytes too (``sniff_magic``: binary formats such as Parquet), then a
file's first non-empty line of the file kinds (``sniff``): the first kind SURE of it
wins, else the first that says MAYBE (a raw list takes any other JSON line and an empty
file); a line no kind claims is not an input (a notes file is never taken for a list of
commands).
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Dict, Optional, Tuple

from lhotse.utils import Pathlike

from wenet_lhotse.errors import WenetDataError
from wenet_lhotse.io.remote import is_remote
from wenet_lhotse.sources.kinds.base import InputKind
from wenet_lhotse.sources.kinds.sniff import MAYBE, SURE, local_first_line, remote_first_line

#: Every input kind's module (``wenet_lhotse.sources.kinds.<name>``), one line each.
KIND_MODULES = (
    "raw",
    "shard",
    "cuts",
    "shar",
    "text",
    "parquet",
    "nemo",
)

_KINDS: Dict[str, InputKind] = {}


def kinds() -> Tuple[InputKind, ...]:
    """Every registered kind, in registration order."""
    if not _KINDS:
        for module in KIND_MODULES:
            kind = importlib.import_module(f"wenet_lhotse.sources.kinds.{module}").KIND
            _KINDS[kind.name] = kind
    return tuple(_KINDS.values())


def kind_names(**flags: bool) -> Tuple[str, ...]:
    """The names of the kinds whose flags have these values, e.g. ``wenet=True``.

    >>> kind_names(wenet=True), kind_names(streamable=True)
    (('raw', 'shard'), ('shard', 'shar'))
    """
    return tuple(k.name for k in kinds()
                 if all(getattr(k, f) == v for f, v in flags.items()))


def get_kind(name: str) -> InputKind:
    """The kind called ``name``; ValueError naming the known kinds otherwise.

    >>> kind = get_kind("shard")
    >>> kind.wenet, kind.lists_tars, kind.description
    (True, True, 'WeNet shard list (one tar path, URL or pipe: per line)')
    """
    kinds()
    if name not in _KINDS:
        raise ValueError(f"kind must be one of {kind_names(detected=True)} or 'auto', "
                         f"got {name!r}")
    return _KINDS[name]


def fields_kind() -> str:
    """The kind whose sources may give ``fields`` instead of ``path`` (Lhotse Shar)."""
    return next(k.name for k in kinds() if k.takes_fields)


def detect(path: Pathlike) -> str:
    """The name of ``path``'s kind (see the module doc). Raises
    :class:`WenetDataError` for a missing path and for content no kind claims.

    >>> import json, os, tempfile
    >>> lines = {"raw": {"key": "a", "wav": "a.wav"}, "cuts": {"id": "a"},
    ...          "nemo": {"audio_filepath": "a.wav", "duration": 1.0}}
    >>> for name, first in lines.items():
    ...     with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
    ...         print(json.dumps(first), file=f)
    ...     print(name, detect(f.name)); os.unlink(f.name)
    raw raw
    cuts cuts
    nemo nemo
    """
    where = str(path)
    remote = is_remote(where)
    if not remote and not os.path.exists(where):
        raise WenetDataError("no such file or directory", where, kind="missing_file")
    if remote or os.path.isdir(where):
        found = next((k for k in kinds() if k.detected and k.sniff_dir(where)), None)
        if found is not None:
            return found.name
        if not remote:
            raise WenetDataError("directory without cuts.*.jsonl.gz: not a Lhotse Shar "
                                 "directory", where, kind="format")
    if not remote:
        head = _head(where)
        found = next((k for k in kinds() if k.detected and k.sniff_magic(head)), None)
        if found is not None:
            return found.name
    first = remote_first_line(where) if remote else local_first_line(Path(where))
    fallback: Optional[InputKind] = None
    for kind in kinds():
        if not kind.detected or kind.directory:
            continue
        verdict = kind.sniff(first)
        if verdict == SURE:
            return kind.name
        if verdict == MAYBE and fallback is None:
            fallback = kind
    if fallback is not None:
        return fallback.name
    named = "".join(f"; a {k.name} source is named in lhotse_conf.sources as "
                    f"`type: {k.name}`" for k in kinds() if not k.detected)
    raise WenetDataError(
        f"not an input: its first line {printable(first.line)} is neither JSON (a raw list "
        f"or manifest) nor a tar path or URL (a shard list){named}", where, line=first.no,
        kind="format")


def _head(path: str, size: int = 16) -> bytes:
    """The first ``size`` bytes of a local regular file (b"" for anything else -- a
    FIFO would block -- and what cannot be read: its error comes from the line reader)."""
    if not os.path.isfile(path):
        return b""
    try:
        with open(path, "rb") as f:
            return f.read(size)
    except OSError:
        return b""


def printable(text: str, limit: int = 40) -> str:
    """``text`` quoted for a one-line message: printable ASCII only (anything else as
    ``?``; a binary file's bytes never reach a terminal), cut to ``limit`` characters.

    >>> printable("PAR1" + chr(0x15) + chr(0xd0)), printable("x" * 50, 8)
    ("'PAR1??'", "'xxxxxxxx...'")
    """
    safe = "".join(c if " " <= c <= "~" else "?" for c in text[:limit])
    return repr(safe + ("..." if len(text) > limit else ""))

