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
  ``NaN``/``Infinity``), or a cut holding no sample at its rate (kind ``"bad_segment"``);
* an audio source of type ``"command"`` (Lhotse runs it through a shell when loading)
  unless the read policy opts in to commands (kind ``"refused"``);
* a cut id met earlier in the same input (kind ``"duplicate"``; the first copy is
  kept; :class:`LazyCheckedManifest`, with a :class:`~wenet_lhotse.formats.keyset.KeySet`);
* a manifest cut short (a truncated gzip stream; kind ``"truncated"``): the error says
  after which line it stopped (what followed cannot be counted: it is gone).

Strict mode raises :class:`~wenet_lhotse.errors.WenetDataError`; fault-tolerant mode
records the item in the skip report and goes on (after a truncation, with the next
manifest).
"""

from __future__ import annotations

import dataclasses
import gzip
import io
import json
import os
import zlib
from typing import Any, Iterator, List, Optional, Sequence, Tuple

from lhotse import Recording, SupervisionSegment
from lhotse.audio.source import AudioSource
from lhotse.cut import Cut, MonoCut
from lhotse.lazy import Dillable, count_newlines_fast
from lhotse.serialization import deserialize_item
from lhotse.utils import Pathlike, compute_num_samples

from wenet_lhotse.errors import WenetDataError, reraise_worker_death
from wenet_lhotse.formats.checks import TOO_DEEP, key_problem, text_problem
from wenet_lhotse.formats.keyset import KeySet
from wenet_lhotse.io.lines import bounded_lines
from wenet_lhotse.io.policy import PolicyHolder, ReadPolicy
from wenet_lhotse.io.remote import is_remote
from wenet_lhotse.io.streams import as_path_list, open_input
from wenet_lhotse.sources.meta_cut import MetaCut

try:  # 4-5x faster than json.loads per line; Lhotse uses it too when installed
    import orjson

    def _loads(line: Any) -> Any:
        try:
            return orjson.loads(line)
        except orjson.JSONDecodeError:
            # json's message and column for the error; and what json accepts but orjson
            # refuses (NaN, lone surrogates) reaches the checks below as before
            return json.loads(line)
except ImportError:  # pragma: no cover - orjson is a dependency
    _loads = json.loads


def _has_command_source(obj: Any) -> bool:
    if isinstance(obj, dict):
        if obj.get("type") == "command" and "source" in obj:
            return True
        return any(_has_command_source(v) for v in obj.values())
    if isinstance(obj, list):
        return any(_has_command_source(v) for v in obj)
    return False


def _span_problem(cut_span: Tuple[Any, Any], sup_spans: Sequence[Tuple[Any, Any]]
                  ) -> Optional[str]:
    """Why the cut's ``(start, duration)`` and its supervisions' are not usable times
    (seconds), or None."""
    spans = [("start", cut_span[0]), ("duration", cut_span[1])]
    for start, duration in sup_spans:
        spans += [("supervision start", start), ("supervision duration", duration)]
    for name, value in spans:
        if not isinstance(value, (int, float)) or value != value or value in (
                float("inf"), float("-inf")):
            return f"{name} must be finite, got {value}"
    if cut_span[0] < 0 or cut_span[1] <= 0:
        return f"bad span start={cut_span[0]} duration={cut_span[1]} (seconds)"
    return None


def _samples_problem(duration: float, rate: Any) -> Optional[str]:
    """Why a cut of ``duration`` seconds at ``rate`` Hz holds no sample, or None (a cut
    without audio has no rate: None)."""
    if isinstance(rate, int) and rate > 0 and compute_num_samples(duration, rate) < 1:
        return f"duration={duration} s holds no sample at {rate} Hz"
    return None


def _time_problem(cut: Cut) -> Optional[str]:
    sups = getattr(cut, "supervisions", None) or []
    return _span_problem((cut.start, cut.duration), [(s.start, s.duration) for s in sups])


def _load_checked(line: Any, path: str, lineno: int, policy: ReadPolicy) -> Any:
    """The line's JSON object, with the checks that need no Lhotse object."""
    try:
        obj = _loads(line)
    except json.JSONDecodeError as e:
        raise WenetDataError(f"malformed JSON: {e.msg} (column {e.colno})", path,
                             line=lineno, kind="json") from None
    except RecursionError:  # json on '[[[[...' (orjson refuses it, json recurses)
        raise WenetDataError(TOO_DEEP, path, line=lineno, kind="json") from None
    try:
        return _checked_object(obj, line, path, lineno, policy)
    except RecursionError:  # walking an object nested just under json's limit
        raise WenetDataError(TOO_DEEP, path, line=lineno, kind="json") from None


def _checked_object(obj: Any, line: Any, path: str, lineno: int, policy: ReadPolicy) -> Any:

    def holds(marker: str) -> bool:  # a cheap look at the line before walking the object
        return marker in line if isinstance(line, str) else marker.encode() in line

    if holds("\\u"):
        why = text_problem(obj)
        if why is not None:
            raise WenetDataError(why, path, line=lineno, kind="encoding")
    if holds('"command"') and _has_command_source(obj):
        policy.check_pipe(path, line=lineno, what="an audio source of type 'command'")
    return obj


# The default of the parsers below: refuses commands (only its check_pipe is used, so one
# shared instance serves every call without a policy).
_REFUSING = ReadPolicy()


def _to_cut(obj: Any, path: str, lineno: int, extra_custom: Optional[dict] = None) -> Cut:
    def fail(msg: str, kind: str) -> WenetDataError:
        return WenetDataError(msg, path, line=lineno, kind=kind)

    try:
        cut = deserialize_item(obj)
    except Exception as err:  # Lhotse raises anything for a malformed object
        reraise_worker_death(err)
        raise fail(f"not a Lhotse cut: {type(err).__name__}: {err}".splitlines()[0],
                   "json") from None
    why = key_problem(cut.id)
    if why is not None:
        raise fail(f"unsafe cut id {cut.id[:40]!r}: {why}", "unsafe_key")
    rate = cut.sampling_rate if getattr(cut, "has_recording", False) else None
    why = _time_problem(cut) or _samples_problem(cut.duration, rate)
    if why is not None:
        raise fail(why, "bad_segment")
    if extra_custom:
        cut.custom = {**(cut.custom or {}), **extra_custom}
    return cut


def parse_manifest_line(line: Any, path: str, lineno: int, policy: Optional[ReadPolicy] = None,
                        extra_custom: Optional[dict] = None) -> Cut:
    """One manifest line (str or UTF-8 bytes) -> its cut, ``extra_custom`` merged into
    its ``custom`` (a reader's keys, e.g. ``shar_tar``); :class:`WenetDataError` naming
    ``path:lineno``. ``policy`` decides whether a ``command`` audio source may stand
    (:meth:`~wenet_lhotse.io.policy.ReadPolicy.check_pipe`; default: refused)."""
    return _to_cut(_load_checked(line, path, lineno, policy or _REFUSING), path, lineno,
                   extra_custom)


def _fields(cls: Any, drop: Sequence[str] = (), extra: Sequence[str] = ()
            ) -> Tuple[frozenset, frozenset]:
    """(required, allowed) keys of a Lhotse dataclass's ``from_dict`` input."""
    fs = [f for f in dataclasses.fields(cls) if f.init and f.name not in drop]
    required = frozenset(f.name for f in fs if f.default is dataclasses.MISSING
                         and f.default_factory is dataclasses.MISSING)
    return required, frozenset(f.name for f in fs) | frozenset(extra)


# What a plain line may hold: deserialize_item builds such a line without error
# (anything else -- features, transforms, video, unknown keys -- takes the full path).
_CUT = _fields(MonoCut, drop=("features",), extra=("type",))
_RECORDING = _fields(Recording, drop=("transforms",))
_SOURCE = _fields(AudioSource, drop=("video",))
_SUPERVISION = _fields(SupervisionSegment)


def _keys_ok(obj: Any, fields: Tuple[frozenset, frozenset]) -> bool:
    return isinstance(obj, dict) and fields[0] <= obj.keys() <= fields[1]


def _plain_mono(obj: Any) -> bool:
    """A ``MonoCut`` that ``deserialize_item`` builds without error and whose fields a
    :class:`MetaCut` reads have the right types (anything else takes the full path, with
    its errors)."""
    if not _keys_ok(obj, _CUT) or obj.get("type") != "MonoCut":
        return False
    rec, sups = obj.get("recording"), obj.get("supervisions", [])
    return (_keys_ok(rec, _RECORDING) and isinstance(rec["sampling_rate"], int)
            and isinstance(rec["sources"], list)
            and all(_keys_ok(src, _SOURCE) for src in rec["sources"])
            and isinstance(obj["id"], str) and isinstance(sups, list)
            and all(_keys_ok(sup, _SUPERVISION) for sup in sups))


def parse_manifest_meta(line: Any, path: str, lineno: int, policy: Optional[ReadPolicy] = None,
                        extra_custom: Optional[dict] = None) -> Any:
    """Like :func:`parse_manifest_line` (the same checks, the same errors), but a plain
    ``MonoCut`` comes back as a :class:`~wenet_lhotse.sources.meta_cut.MetaCut` (its
    Lhotse objects built on demand); any other line as its cut, with ``extra_custom``
    merged into ``custom`` either way."""
    obj = _load_checked(line, path, lineno, policy or _REFUSING)
    if not _plain_mono(obj):
        return _to_cut(obj, path, lineno, extra_custom)
    why = key_problem(obj["id"])
    if why is not None:
        raise WenetDataError(f"unsafe cut id {obj['id'][:40]!r}: {why}", path, line=lineno,
                             kind="unsafe_key")
    why = _span_problem((obj["start"], obj["duration"]),
                        [(s["start"], s["duration"]) for s in obj.get("supervisions", ())]
                        ) or _samples_problem(obj["duration"], obj["recording"]["sampling_rate"])
    if why is not None:
        raise WenetDataError(why, path, line=lineno, kind="bad_segment")
    return MetaCut(obj, line, extra_custom, (path, lineno))


def duplicate_error(cut_id: str, path: str, lineno: Optional[int]) -> WenetDataError:
    """The error of a cut id met a second time (the first copy is kept: training,
    statistics and writers see each id once, as ``validate`` requires)."""
    return WenetDataError(f"duplicate cut id {cut_id[:80]!r} (first seen earlier in this "
                          "input)", path, line=lineno, kind="duplicate")


def iter_manifest(path: str, metadata_only: bool = False,
                  *, policy: Optional[ReadPolicy] = None) -> Iterator[Tuple[Any, int]]:
    """``(cut or WenetDataError, line number)`` for each non-empty line of one manifest;
    a truncated or unreadable file ends with one ``WenetDataError`` (kind
    ``"truncated"``) saying how much was not read. ``metadata_only``: plain cuts come as
    :class:`MetaCut` (:func:`parse_manifest_meta`). ``policy``: ``command`` sources
    allowed or not, network limits, URL protocols;
    its ``strict`` is the caller's business (every error is yielded)."""
    policy = (policy or ReadPolicy())
    parse = parse_manifest_meta if metadata_only else parse_manifest_line
    no = 0
    with open_input(path, policy=policy) as raw:  # a local file or an object-store URL
        binary = gzip.GzipFile(fileobj=raw, mode="rb") if path.endswith(".gz") else raw
        try:
            long: List[WenetDataError] = []  # lines over the policy's line limit
            text = io.TextIOWrapper(binary, encoding="utf-8")
            lines = bounded_lines(text, path, policy.line_limit(),  # strict: stop at once
                                  None if policy.strict else long.append)
            for no, line in _stop_at_too_long(lines):
                while long:
                    err = long.pop(0)
                    yield err, err.line
                if isinstance(line, WenetDataError):  # strict: the file ends there
                    yield line, no
                    return
                if not line.strip():
                    continue
                try:
                    yield parse(line, path, no, policy), no
                except WenetDataError as err:
                    yield err, no
            for err in long:  # the last line was too long
                yield err, err.line
        except (OSError, EOFError, UnicodeDecodeError, zlib.error) as err:
            yield WenetDataError(
                f"unreadable after line {no}: {type(err).__name__}: {err}", path,
                line=no + 1, kind="truncated"), no + 1


def _stop_at_too_long(lines: Iterator[Tuple[int, str]]) -> Iterator[Tuple[int, Any]]:
    """``lines``; a line over the limit raised by them (strict) comes as its error, last."""
    try:
        yield from lines
    except WenetDataError as err:
        if err.kind != "too_long":
            raise
        yield err.line, err


class LazyCheckedManifest(PolicyHolder, Dillable):
    """The cuts of Lhotse manifest(s), read lazily with the checks of the module doc
    (``metadata_only``: plain cuts as :class:`MetaCut`), bad lines raised or skipped
    as ``policy`` says.
    Picklable; ``len()`` counts lines (as Lhotse's lazy manifests do)."""

    def __init__(self, paths: Sequence[Pathlike], metadata_only: bool = False,
                 check_duplicates: bool = True, *,
                 policy: Optional[ReadPolicy] = None) -> None:
        self.paths: List[str] = [p if is_remote(p) else os.path.abspath(p)
                                 for p in as_path_list(paths)]
        self.policy = (policy or ReadPolicy())
        self.metadata_only = metadata_only
        self.check_duplicates = check_duplicates

    def __iter__(self) -> Iterator[Cut]:
        self.policy.lend_to_lhotse()  # the audio URLs it allowed, opened later by Lhotse
        seen = KeySet() if self.check_duplicates else None
        for path in self.paths:
            for item, no in iter_manifest(path, metadata_only=self.metadata_only,
                                          policy=self.policy):
                if not isinstance(item, WenetDataError) and seen is not None \
                        and not seen.add(item.id):
                    item = duplicate_error(item.id, path, no)
                if isinstance(item, WenetDataError):
                    self.policy.handle(item)
                    continue
                yield item

    def __len__(self) -> int:
        try:
            return sum(count_newlines_fast(p) for p in self.paths)
        except (OSError, EOFError, zlib.error):  # reported, with its line, when iterated
            raise TypeError("length unknown: a manifest is unreadable") from None
