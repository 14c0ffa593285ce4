"""The lines a resume state carries, checked before a reader uses them: a checkpoint is
input like any other (the loader's own checks of a state are
:mod:`wenet_lhotse.loader.state_check`).

* :func:`checked_state_line` -- each kept manifest line goes through the manifest-line
  check (:func:`~wenet_lhotse.sources.manifest.parse_manifest_line`: no ``command`` audio
  source, safe ids, finite times) and its Shar tar must be one of the reader's;
* :class:`DuplicateIds` -- a reader's pass drops a cut id met before in the pass, also
  when the pass resumes mid-way in a file (the ids of the lines before the resume point
  are noted without parsing them).

Every problem is one :class:`StateError` line naming the state's key.
"""

from __future__ import annotations

import json
import re
from typing import Any, Optional, Sequence

from wenet_lhotse.formats.keyset import KeySet
from wenet_lhotse.sources.manifest import duplicate_error, parse_manifest_line

#: ``source`` of the errors about lines a state carries.
STATE_SOURCE = "resume state"


class StateError(ValueError):
    """A resume state that cannot be used; ``str()`` is one line naming the key."""

    def __init__(self, key: str, message: str) -> None:
        self.key = key
        super().__init__(f"bad resume state: {key}: {message}")


def checked_state_line(raw: Any, shar_tars: Optional[Sequence[Optional[str]]]) -> Any:
    """A kept ``[line, tar]`` of a state as ``(line bytes, tar)``, after the
    manifest-line check (a :class:`~wenet_lhotse.errors.WenetDataError` naming
    :data:`STATE_SOURCE`) and with its tar one of ``shar_tars``."""
    if (not isinstance(raw, list) or len(raw) != 2 or not isinstance(raw[0], str)
            or not (raw[1] is None or isinstance(raw[1], str))):
        raise StateError("sampler.snapshot.lines", "expected [manifest line, tar or null]")
    line, tar = raw
    if tar is not None and tar not in (shar_tars or ()):
        raise StateError("sampler.snapshot.lines",
                         f"tar {tar[:80]!r} is not one of this source's Shar tars")
    parse_manifest_line(line, STATE_SOURCE, None)  # type: ignore[arg-type]
    return line.encode("utf-8"), tar


#: The id of a Lhotse manifest line, which ``to_dict`` writes first.
_ID = re.compile(rb'^\s*\{\s*"id"\s*:\s*"((?:[^"\\]|\\.)*)"')


class DuplicateIds:
    """The cut ids of one reader pass: :meth:`check` raises the ``"duplicate"`` error
    for an id met before in the pass. A pass resumed at ``start`` > 0 notes the ids
    of the lines it reads but does not parse (:meth:`note_line`, a regex on the raw
    line), so it drops the copies an uninterrupted pass drops -- except (fault-tolerant
    mode only; strict stops at the first copy) a copy whose first copy is in a file
    wholly before the resume point, which a resumed pass does not open."""

    def __init__(self, start: int) -> None:
        self.exact = start > 0
        self.seen = KeySet()

    def note_line(self, line: bytes) -> None:
        if self.exact:
            m = _ID.match(line)
            if m is not None:
                try:
                    self.seen.add(json.loads(b'"' + m.group(1) + b'"'))
                except ValueError:
                    pass

    def check(self, cut_id: str, path: str, lineno: int) -> None:
        if not self.seen.add(cut_id):
            raise duplicate_error(cut_id, path, lineno)
