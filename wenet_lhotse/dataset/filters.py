"""WeNet's ``filter_conf`` as lazy CutSet filters on metadata only (no audio is read).

Semantics of WeNet's ``processor.filter`` (defaults are its function defaults, used
for any key the yaml leaves out):

* ``num_frames = samples / sample_rate * 100`` (10 ms frames, float, not rounded);
  WeNet filters before resampling and speed perturbation, and so do we (frames
  counted from the cut's own sample count and rate, or ``duration * 100``).
* drop when ``num_frames < min_length`` or ``num_frames > max_length`` (the bounds
  themselves are kept);
* when the cut has a transcript (WeNet: when the sample has a label): with
  ``n = len(tokenizer.tokenize(text)[1])`` (ids, so unknown tokens dropped by a table
  without ``<unk>`` do not count), drop when ``n < token_min_length`` or
  ``n > token_max_length``; and, if ``num_frames != 0``, when
  ``n / num_frames < min_output_input_ratio`` or ``> max_output_input_ratio``.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import asdict, dataclass, fields
from typing import Any, Callable, Dict, Mapping, Optional, Union

from lhotse import CutSet
from lhotse.cut import Cut

from wenet_lhotse.dataset.cut_fields import num_frames_10ms
from wenet_lhotse.formats.layout import cut_text

logger = logging.getLogger(__name__)

#: Reasons :func:`filter_reason` returns, in the order WeNet checks them.
REASONS = ("too_short", "too_long", "too_few_tokens", "too_many_tokens",
           "ratio_too_low", "ratio_too_high")


@dataclass(frozen=True)
class FilterConf:
    """WeNet's ``filter_conf``. Lengths in 10 ms frames; ratios in tokens per frame.

    Defaults are those of WeNet's ``processor.filter`` (recipes usually set
    ``max_length: 40960`` and ``min_length: 0``).
    """

    max_length: float = 10240
    min_length: float = 10
    token_max_length: int = 200
    token_min_length: int = 1
    min_output_input_ratio: float = 0.0005
    max_output_input_ratio: float = 1

    @classmethod
    def from_dict(cls, conf: Optional[Mapping[str, Any]]) -> FilterConf:
        """From a yaml ``filter_conf`` dict; unknown keys raise ValueError (WeNet's
        ``filter(**filter_conf)`` would raise TypeError)."""
        conf = dict(conf or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(conf) - known)
        if unknown:
            raise ValueError(f"unknown filter_conf keys {unknown}; known: {sorted(known)}")
        return cls(**conf)

    def to_dict(self) -> dict:
        return asdict(self)


def _as_conf(filter_conf: Union[FilterConf, Mapping[str, Any], None]) -> FilterConf:
    return filter_conf if isinstance(filter_conf, FilterConf) else FilterConf.from_dict(
        filter_conf)


def filter_reason(cut: Cut, tokenizer: Any, filter_conf: Union[FilterConf, Mapping, None] = None,
                  num_tokens: Optional[Callable[[str], int]] = None) -> Optional[str]:
    """Why WeNet's filter would drop ``cut`` (one of :data:`REASONS`), or ``None`` to keep.

    ``tokenizer`` is anything with WeNet's ``tokenize(line) -> (tokens, ids)``; with
    ``None``, or for a cut without transcript, token limits are not checked (WeNet
    checks them only when the sample has a label). ``num_tokens(text)``, when given,
    counts the ids instead of tokenizing here (e.g. a cache).
    """
    conf = _as_conf(filter_conf)
    num_frames = num_frames_10ms(cut)
    if num_frames < conf.min_length:
        return "too_short"
    if num_frames > conf.max_length:
        return "too_long"
    text = cut_text(cut, single=True) if tokenizer is not None else None
    if text is None:
        return None
    n = num_tokens(text) if num_tokens is not None else len(tokenizer.tokenize(text)[1])
    if n < conf.token_min_length:
        return "too_few_tokens"
    if n > conf.token_max_length:
        return "too_many_tokens"
    if num_frames != 0:
        if n / num_frames < conf.min_output_input_ratio:
            return "ratio_too_low"
        if n / num_frames > conf.max_output_input_ratio:
            return "ratio_too_high"
    return None


#: Transcripts whose token count a :class:`WenetFilter` remembers (then it stops adding).
TOKEN_CACHE_SIZE = 10_000


class WenetFilter:
    """Picklable predicate for ``CutSet.filter``: True keeps the cut.

    It remembers the token counts of the first :data:`TOKEN_CACHE_SIZE` transcripts it
    sees: map-style loading reads the first cuts twice before the first batch (bucket
    edges, then the sampler's buffer), and tokenizing is most of the filter's cost."""

    def __init__(self, tokenizer: Any, filter_conf: Union[FilterConf, Mapping, None] = None):
        self.tokenizer = tokenizer
        self.conf = _as_conf(filter_conf)
        self._counts: Dict[str, int] = {}

    def __getstate__(self) -> Dict[str, Any]:
        return {**self.__dict__, "_counts": {}}  # not shipped to DataLoader workers

    def num_tokens(self, text: str) -> int:
        n = self._counts.get(text)
        if n is None:
            n = len(self.tokenizer.tokenize(text)[1])
            if len(self._counts) < TOKEN_CACHE_SIZE:
                self._counts[text] = n
        return n

    def __call__(self, cut: Cut) -> bool:
        reason = filter_reason(cut, self.tokenizer, self.conf, self.num_tokens)
        if reason is not None:
            logger.debug("filter drops %s: %s", cut.id, reason)
        return reason is None


def wenet_filter(cuts: CutSet, tokenizer: Any,
                 filter_conf: Union[FilterConf, Mapping[str, Any], None] = None) -> CutSet:
    """Apply WeNet's ``filter_conf`` to ``cuts``, lazily (nothing is read until iterated;
    only metadata and transcripts are looked at, never audio)."""
    return cuts.filter(WenetFilter(tokenizer, filter_conf))


def filter_stats(cuts: CutSet, tokenizer: Any,
                 filter_conf: Union[FilterConf, Mapping[str, Any], None] = None) -> Counter:
    """Iterate ``cuts`` once and count outcomes: ``Counter({"kept": n, "too_long": m, ...})``."""
    conf = _as_conf(filter_conf)
    counts: Counter = Counter()
    for cut in cuts:
        counts[filter_reason(cut, tokenizer, conf) or "kept"] += 1
    return counts
