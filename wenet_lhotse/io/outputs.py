"""Outputs never clobber inputs: the one check every writer makes of its output path.

A writer refuses an output that

* holds a control character (a newline in a directory name makes lists that their own
  reader rejects: one list line per path);
* is one of its inputs (a list, a tar a shard list names, an audio file a raw list names;
  links and hard links resolved), or lies inside an input directory (a Shar directory:
  ``export SHAR -o SHAR/data.list`` would add a file Lhotse's Shar reader trips on).

Inputs known before writing are checked at once (:func:`refuse_clobber`); inputs met
while reading (the audio of each cut) are checked as they come (:class:`OutputGuard`), and
since every writer writes to a temporary file renamed at the end, the input is still
intact when the error stops the run. Remote outputs and inputs (``s3://``, URLs) are not
checked (no identity to compare).
"""

from __future__ import annotations

import os
from typing import Any, Iterable, Iterator, Optional, Tuple

from lhotse.utils import Pathlike


class OutputClobbersInput(ValueError):
    """An output that would overwrite (or corrupt) an input; ``str()`` is one line."""


def _remote(path: str) -> bool:
    return "://" in path and not path.startswith("file://")


def control_problem(out: Pathlike) -> Optional[str]:
    """Why ``out`` cannot name an output (a control character), or None."""
    bad = sorted({c for c in str(out) if ord(c) < 32 or ord(c) == 127})
    if bad:
        return (f"{str(out)!r}: an output path with a control character "
                f"({', '.join(repr(c) for c in bad)}) makes lists that cannot be read back")
    return None


def _identity(path: str) -> Optional[Tuple[int, int]]:
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return st.st_dev, st.st_ino


def clobber_problem(out: Pathlike, inputs: Iterable[Optional[Pathlike]]) -> Optional[str]:
    """The first of ``inputs`` that writing ``out`` would overwrite (``out`` is that input)
    or corrupt (``out`` lies inside that input directory), in words; None if none."""
    out = str(out)
    if _remote(out):
        return None
    out_real = os.path.realpath(out)
    out_id = _identity(out)
    for src in inputs:
        if src is None or _remote(str(src)):
            continue
        src = str(src)
        src_real = os.path.realpath(src)
        if src_real == out_real or (out_id is not None and _identity(src) == out_id):
            return f"that is an input of this command ({src})"
        if os.path.isdir(src_real) and out_real.startswith(src_real.rstrip(os.sep) + os.sep):
            return f"that lies inside the input directory {src}"
    return None


def refuse_clobber(out: Optional[Pathlike], inputs: Iterable[Optional[Pathlike]],
                   option: str = "-o") -> None:
    """:class:`OutputClobbersInput` (one line naming ``option``, the output and the
    input) when ``out`` has a control character, is one of ``inputs`` or lies inside one
    of them; nothing for ``out`` None."""
    if out is None:
        return
    why = control_problem(out)
    if why is not None:
        raise OutputClobbersInput(f"{option} {why}")
    why = clobber_problem(out, inputs)
    if why is not None:
        raise OutputClobbersInput(f"{option} {out}: {why}; writing it would overwrite it")


class OutputGuard:
    """Checks inputs met while reading (each cut's audio files) against an output. Only
    an output that exists can be an input, so a guard of a new output checks nothing
    (``active`` is False) and costs nothing; an existing one costs a ``stat`` per file."""

    def __init__(self, out: Optional[Pathlike], option: str = "-o") -> None:
        self.out = None if out is None or _remote(str(out)) else str(out)
        self.option = option
        self._id = _identity(self.out) if self.out else None

    @property
    def active(self) -> bool:
        return self._id is not None

    def check(self, src: str) -> None:
        """:class:`OutputClobbersInput` when ``src`` is the output."""
        if self._id is not None and not _remote(src) and _identity(src) == self._id:
            raise OutputClobbersInput(f"{self.option} {self.out}: that is an input of this "
                                      f"command (the audio {src}); writing it would "
                                      "overwrite it")

    def check_cut(self, cut: Any) -> None:
        """:meth:`check` each file audio source of ``cut`` (a cut, or its dict)."""
        if self._id is None:
            return
        rec = cut.get("recording") if isinstance(cut, dict) else getattr(cut, "recording", None)
        sources = (rec.get("sources") if isinstance(rec, dict) else getattr(rec, "sources", None))
        for s in sources or ():
            kind, src = ((s.get("type"), s.get("source")) if isinstance(s, dict)
                         else (getattr(s, "type", None), getattr(s, "source", None)))
            if kind == "file" and isinstance(src, str):
                self.check(src)

    def cuts(self, cuts: Iterable[Any]) -> Iterator[Any]:
        """``cuts``, each one's file audio sources checked first."""
        for cut in cuts:
            self.check_cut(cut)
            yield cut
