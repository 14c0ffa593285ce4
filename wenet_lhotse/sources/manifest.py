"""Lhotse cuts manifests (``cuts.jsonl`` / ``cuts.jsonl.gz``) read line by line, with the
checks every input gets at the boundary, and errors naming file and line.

Lhotse's own lazy reader (``CutSet.from_jsonl_lazy``) takes any line it can parse.
:class:`LazyCheckedManifest` reads the same cuts (``deserialize_item`` per line) and
refuses, as bad input:

* a line that is not JSON or not a Lhotse object (kind ``"json"``);
* a string that is not valid Unicode (a ``\\ud800`` escape; kind ``"encoding"``);
* a cut id unsafe as a file or member name (kind ``"unsafe_key"``, see
  :mod:`wenet_lhotse.formats.checks`);
* a non-finite or negative ``start``/``duration`` of the cut or a supervision (JSON's
  ``NaN``/``Infinity``; kind ``"bad_segment"``);
* an audio source of type ``"command"`` (Lhotse runs it through a shell when loading)
  unless ``allow_pipe`` (kind ``"refused"``);
* a manifest cut short (a truncated gzip stream; kind ``"truncated"``): the error says
  after which line it stopped (what followed cannot be counted: it is gone).

Strict mode raises :class:`~wenet_lhotse.errors.WenetDataError`; fault-tolerant mode
records the item in the skip report and goes on (after a truncation, with the next
manifest).
"""

from __future__ import annotations

import gzip
import io
import json
import os
import zlib
from typing import Any, Iterator, List, Optional, Sequence, Tuple

from lhotse.cut import Cut
from lhotse.lazy import Dillable, count_newlines_fast
from lhotse.serialization import deserialize_item
from lhotse.utils import Pathlike

from wenet_lhotse.errors import SkipReport, WenetDataError
from wenet_lhotse.formats.checks import PIPE_REFUSED, key_problem, text_problem
from wenet_lhotse.formats.remote import is_remote
from wenet_lhotse.formats.streams import as_path_list, open_input


def _has_command_source(obj: Any) -> bool:
    if isinstance(obj, dict):
        if obj.get("type") == "command" and "source" in obj:
            return True
        return any(_has_command_source(v) for v in obj.values())
    if isinstance(obj, list):
        return any(_has_command_source(v) for v in obj)
    return False


def _time_problem(cut: Cut) -> Optional[str]:
    spans = [("start", cut.start), ("duration", cut.duration)]
    for sup in getattr(cut, "supervisions", None) or []:
        spans += [("supervision start", sup.start), ("supervision duration", sup.duration)]
    for name, value in spans:
        if not isinstance(value, (int, float)) or value != value or value in (
                float("inf"), float("-inf")):
            return f"{name} must be finite, got {value}"
    if cut.start < 0 or cut.duration <= 0:
        return f"bad span start={cut.start} duration={cut.duration} (seconds)"
    return None


def parse_manifest_line(line: str, path: str, lineno: int, allow_pipe: bool = False) -> Cut:
    """One manifest line -> its cut; :class:`WenetDataError` naming ``path:lineno``."""
    def fail(msg: str, kind: str) -> WenetDataError:
        return WenetDataError(msg, path, line=lineno, kind=kind)

    try:
        obj = json.loads(line)
    except json.JSONDecodeError as e:
        raise fail(f"malformed JSON: {e.msg} (column {e.colno})", "json") from None
    if "\\u" in line:
        why = text_problem(obj)
        if why is not None:
            raise fail(why, "encoding")
    if not allow_pipe and '"command"' in line and _has_command_source(obj):
        raise fail(f"an audio source of type 'command': {PIPE_REFUSED}", "refused")
    try:
        cut = deserialize_item(obj)
    except Exception as err:  # Lhotse raises anything for a malformed object
        raise fail(f"not a Lhotse cut: {type(err).__name__}: {err}".splitlines()[0],
                   "json") from None
    why = key_problem(cut.id)
    if why is not None:
        raise fail(f"unsafe cut id {cut.id[:40]!r}: {why}", "unsafe_key")
    why = _time_problem(cut)
    if why is not None:
        raise fail(why, "bad_segment")
    return cut


def iter_manifest(path: str, allow_pipe: bool = False) -> Iterator[Tuple[Any, int]]:
    """``(cut or WenetDataError, line number)`` for each non-empty line of one manifest;
    a truncated or unreadable file ends with one ``WenetDataError`` (kind
    ``"truncated"``) saying how much was not read."""
    no = 0
    with open_input(path) as raw:  # a local file or an object-store URL
        binary = gzip.GzipFile(fileobj=raw, mode="rb") if path.endswith(".gz") else raw
        try:
            for no, line in enumerate(io.TextIOWrapper(binary, encoding="utf-8"), 1):
                if not line.strip():
                    continue
                try:
                    yield parse_manifest_line(line, path, no, allow_pipe), no
                except WenetDataError as err:
                    yield err, no
        except (OSError, EOFError, UnicodeDecodeError, zlib.error) as err:
            yield WenetDataError(
                f"unreadable after line {no}: {type(err).__name__}: {err}", path,
                line=no + 1, kind="truncated"), no + 1


class LazyCheckedManifest(Dillable):
    """The cuts of Lhotse manifest(s), read lazily with the checks of the module doc.
    Picklable; ``len()`` counts lines (as Lhotse's lazy manifests do)."""

    def __init__(self, paths: Sequence[Pathlike], strict: bool = True,
                 skip_report: Optional[SkipReport] = None, allow_pipe: bool = False) -> None:
        self.paths: List[str] = [p if is_remote(p) else os.path.abspath(p)
                                 for p in as_path_list(paths)]
        self.strict = strict
        self.skip_report = skip_report if skip_report is not None else SkipReport()
        self.allow_pipe = allow_pipe

    def __iter__(self) -> Iterator[Cut]:
        for path in self.paths:
            for item, _ in iter_manifest(path, self.allow_pipe):
                if isinstance(item, WenetDataError):
                    self.skip_report.handle(item, self.strict)
                    continue
                yield item

    def __len__(self) -> int:
        try:
            return sum(count_newlines_fast(p) for p in self.paths)
        except (OSError, EOFError, zlib.error):  # reported, with its line, when iterated
            raise TypeError("length unknown: a manifest is unreadable") from None
