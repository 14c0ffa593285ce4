"""Text-only sources: sentences for language-model / text-decoder batches.

A text source (``type: text`` in ``lhotse_conf.sources``) is one or more files, local or
at any URL :func:`~wenet_lhotse.io.streams.open_input` reads (``s3://`` and other
fsspec URLs through :mod:`~wenet_lhotse.io.remote`, ``http(s)://``), optionally
gzip-compressed (``.gz``):

* plain text: one sentence a line (blank lines are skipped, and counted);
* JSON lines (``.jsonl`` / ``.json``): ``{"txt": ...}`` (a :class:`TextExample`) or
  ``{"src": ..., "tgt": ...}`` (a :class:`TextPairExample`: e.g. translation or
  text-to-text tasks); an optional ``"key"`` names the item.

Each line becomes Lhotse 1.33's ``TextExample`` / ``TextPairExample`` (experimental in
Lhotse; ``num_tokens`` is what its ``TokenConstraint`` counts), tokenized once here with
the configured WeNet tokenizer (``tokenize(line) -> (tokens, ids)``), and filtered by
WeNet's ``filter_conf`` token limits (``token_min_length`` / ``token_max_length``, WeNet's
defaults 1 / 200; pairs: both sides). The item's key (``custom["id"]``) is
``<source name>:<line>`` unless the line gives ``"key"``; the source's tags go to
``custom`` too (``task``, ``lang``).

Differences from WeNet, which has no text-only data: none to keep. From Lhotse: Lhotse's
``TextExample`` has no id, so ours carry one in ``custom`` (batches need keys). The whole
source is held in memory (token ids as ``int32`` arrays: about 4 bytes a token), which
is what lets :class:`~wenet_lhotse.loader.text_sampler.TextBatchSampler` plan an epoch
and restore any position exactly.

Nothing silent: :class:`TextReadStats` counts lines read, kept, filtered (by reason),
blank and bad; a bad line (invalid JSON, missing field, not UTF-8) is a one-line
:class:`~wenet_lhotse.errors.WenetDataError` naming ``file:line``, or skipped and counted
in ``skip_report`` in fault-tolerant mode.
"""

from __future__ import annotations

import gzip
import json
import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
from lhotse.cut.text import TextExample, TextPairExample

from wenet_lhotse.errors import WenetDataError
from wenet_lhotse.io.policy import ReadPolicy
from wenet_lhotse.io.streams import open_input

logger = logging.getLogger(__name__)

TextItem = Union[TextExample, TextPairExample]


@dataclass
class TextReadStats:
    """What reading a text source did with each line."""

    lines: int = 0
    kept: int = 0
    blank: int = 0
    bad: int = 0
    filtered: Counter = field(default_factory=Counter)

    def __str__(self) -> str:
        filt = ", ".join(f"{k} {v}" for k, v in sorted(self.filtered.items())) or "none"
        return (f"{self.lines} lines: {self.kept} kept, filtered: {filt}, blank {self.blank}, "
                f"bad {self.bad}")


def item_key(item: TextItem) -> str:
    """The key of a text item (``custom["id"]``)."""
    return str((item.custom or {}).get("id", ""))


def _is_jsonl(path: str) -> bool:
    name = path[:-3] if path.endswith(".gz") else path
    return name.endswith(".jsonl") or name.endswith(".json")


def _lines(path: str, policy: ReadPolicy) -> Iterator[Tuple[int, bytes]]:
    """The lines of one text source, each within the policy's line limit (a longer one
    is handled by the policy: raised, or skipped and counted)."""
    raw = open_input(path, policy=policy)
    stream: Any = gzip.GzipFile(fileobj=raw) if path.endswith(".gz") else raw
    try:
        yield from policy.lines(stream, path)
    except (OSError, EOFError) as err:  # a truncated or corrupt gzip member
        raise WenetDataError(f"cannot read: {err}", path, kind="io") from None
    finally:
        stream.close()
        raw.close()


def _ids(tokenizer: Any, text: str) -> np.ndarray:
    return np.asarray(list(tokenizer.tokenize(text)[1]), dtype=np.int32)


def _parse(path: str, lineno: int, raw: bytes, jsonl: bool) -> Optional[Dict[str, Any]]:
    """``{"txt": ...}`` or ``{"src": ..., "tgt": ...}`` (plus ``key``); None for a blank line."""
    try:
        line = raw.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise WenetDataError("not valid UTF-8", path, lineno, kind="encoding") from None
    if not line:
        return None
    if not jsonl:
        return {"txt": line}
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as err:
        raise WenetDataError(f"invalid JSON: {err.msg}", path, lineno, kind="json") from None
    except RecursionError:  # nesting deeper than the interpreter's stack
        raise WenetDataError("invalid JSON: nested too deeply", path, lineno,
                             kind="json") from None
    if not isinstance(obj, dict):
        raise WenetDataError("a JSON object is needed", path, lineno, kind="json")
    if "txt" in obj:
        fields = ("txt",)
    elif "src" in obj and "tgt" in obj:
        fields = ("src", "tgt")
    else:
        raise WenetDataError("needs 'txt', or 'src' and 'tgt'", path, lineno,
                             kind="missing_field")
    for f in fields:
        if not isinstance(obj[f], str):
            raise WenetDataError(f"'{f}' must be a string", path, lineno, kind="invalid")
    out = {f: obj[f] for f in fields}
    if "key" in obj:
        out["key"] = str(obj["key"])
    return out


def _too(n: int, lo: int, hi: int) -> Optional[str]:
    if n < lo:
        return "too_few_tokens"
    if n > hi:
        return "too_many_tokens"
    return None


def read_text_source(
    paths: Sequence[str],
    tokenizer: Any,
    *,
    name: str = "text",
    filter_conf: Optional[Mapping[str, Any]] = None,
    tags: Optional[Mapping[str, Any]] = None,
    policy: Optional[ReadPolicy] = None,
) -> Tuple[List[TextItem], TextReadStats]:
    """Read, tokenize and filter a text source; returns ``(items, stats)``.

    :param tokenizer: WeNet-style ``tokenize(line) -> (tokens, ids)``.
    :param filter_conf: WeNet's ``filter_conf``: only ``token_min_length`` (default 1)
        and ``token_max_length`` (default 200) apply to text.
    :param tags: added to each item's ``custom`` (``task``, ``lang``, ...).
    :param policy: how to read: raise on the first bad line (``strict``) or skip it
        and record it in ``skip_report``; ``pipe:`` inputs; network limits.
    """
    if tokenizer is None or not callable(getattr(tokenizer, "tokenize", None)):
        raise ValueError(f"text source {name}: needs a tokenizer with WeNet's tokenize(line)")
    fc = dict(filter_conf or {})
    lo, hi = int(fc.get("token_min_length", 1)), int(fc.get("token_max_length", 200))
    policy = (policy or ReadPolicy())
    stats = TextReadStats()
    items: List[TextItem] = []
    base_custom = dict(tags or {})
    first_shape: Dict[str, str] = {}  # a file's first line's kind: txt or src/tgt
    for path in paths:
        jsonl = _is_jsonl(path)
        for lineno, raw in _lines(str(path), policy):
            stats.lines += 1
            try:
                obj = _parse(path, lineno, raw, jsonl)
            except WenetDataError as err:
                policy.handle(err)
                stats.bad += 1
                continue
            if obj is None:
                stats.blank += 1
                continue
            shape = "'src'/'tgt'" if "src" in obj else "'txt'"
            if first_shape.setdefault(str(path), shape) != shape:  # one kind per source
                policy.handle(WenetDataError(
                    f"a {shape} line in a source of {first_shape[str(path)]} lines (one text "
                    "source holds one kind: split it into two sources)", path, lineno,
                    kind="mixed"))
                stats.bad += 1
                continue
            custom = {**base_custom, "id": obj.get("key", f"{name}:{lineno}")}
            if "txt" in obj:
                ids = _ids(tokenizer, obj["txt"])
                why = _too(len(ids), lo, hi)
                item: TextItem = TextExample(obj["txt"], ids, custom)
            else:
                src, tgt = _ids(tokenizer, obj["src"]), _ids(tokenizer, obj["tgt"])
                why = _too(len(tgt), lo, hi) or _too(len(src), lo, hi)
                item = TextPairExample(TextExample(obj["src"], src), TextExample(obj["tgt"], tgt),
                                       custom)
            if why is not None:
                stats.filtered[why] += 1
                continue
            stats.kept += 1
            items.append(item)
    logger.info("text source %s: %s", name, stats)
    return items, stats
