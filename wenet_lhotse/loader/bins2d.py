"""2D buckets for speech: (duration, output tokens), with a batch size per bucket.

In speech-LLM and attention-decoder training the text side sets much of the memory; 1D
duration buckets put a 2 s utterance with 5 tokens next to a 2 s one with 40, and every
target is padded to the longest. 2D buckets split each duration bucket by token count
(NeMo's ``bucket_duration_bins`` as ``[duration, tokens]`` pairs and its
``estimate_duration_bins_2d.py``).

* :func:`estimate_bins_2d`: equal-count duration edges, then equal-count token edges
  within each duration bucket; bins ``[(max_duration_s, max_tokens), ...]`` ordered by
  duration group, then tokens.
* :func:`bucket_batch_sizes`: per bucket ``floor(max_duration / duration edge)``, capped
  by ``max_tokens / token edge`` when a token budget is given (NeMo's OOMptimizer searches
  these on a GPU; here they follow from the budgets).
* :class:`Bucket2DConstraint`: a Lhotse ``SamplingConstraint`` whose ``select_bucket``
  takes the first bin holding both the cut's duration and its token count (Lhotse 1.33's
  ``DynamicBucketingSampler`` asks the constraint for the bucket: ``duration_bins`` may
  then be these pairs), with a fixed batch size per bucket, as Lhotse's
  ``FixedBucketBatchSizeConstraint`` for 1D. A cut beyond every bin goes to the last.

Token counts come from ``cut.custom["num_tokens"]`` (see :func:`with_num_tokens`) or, in
the loader, from a :class:`TokenCounter` (WeNet's tokenizer, once per cut id): bucketing
reads no audio. In training: ``lhotse_conf.bucket_bins_2d`` / ``bucket_batch_sizes_2d``
(map-style loading, :func:`loader_constraint_2d`); durations are the cuts' own (before
speed perturbation), the batch size per bucket is fixed (an epoch's remainders are merged
as for the other constraints: such a batch follows its first cut's bucket).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np
from lhotse.dataset.sampling.base import SamplingConstraint
from lhotse.utils import fastcopy

from wenet_lhotse.formats.layout import cut_text

Bin = Tuple[float, int]


def num_tokens(cut: Any) -> int:
    """A cut's output tokens: ``cut.custom["num_tokens"]``."""
    return int((cut.custom or {})["num_tokens"])


class TokenCounter:
    """``cut -> output tokens`` with WeNet's tokenizer, counted once per cut id (a
    buffered cut is measured again when batched, and after a restore it is a ``LazyCut``
    whose text is read from its line only then)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.cache: Dict[str, int] = {}

    def __call__(self, cut: Any) -> int:
        n = self.cache.get(cut.id)
        if n is None:
            sups = getattr(cut, "supervisions", None)
            if sups is None:  # a LazyCut (restored): its line holds the text
                cut = cut.materialize()
                sups = cut.supervisions
            text = " ".join(s.text for s in sups if s.text) if sups else ""
            n = len(self.tokenizer.tokenize(text)[1]) if text else 0
            self.cache[cut.id] = n
        return n


def with_num_tokens(cuts: Iterable[Any], tokenizer: Any) -> List[Any]:
    """The cuts with ``custom["num_tokens"]`` set from WeNet's tokenizer (ids counted)."""
    out = []
    for cut in cuts:
        n = len(tokenizer.tokenize(cut_text(cut) or "")[1])
        out.append(fastcopy(cut, custom={**(cut.custom or {}), "num_tokens": n}))
    return out


def _quantile_edges(values: np.ndarray, n: int) -> List[float]:
    """``n`` upper edges splitting ``values`` into groups of about equal count (the last
    edge is the maximum)."""
    values = np.sort(values)
    n = max(1, min(n, len(values)))
    edges = [float(values[min(len(values) - 1, math.ceil(len(values) * (i + 1) / n) - 1)])
             for i in range(n)]
    return sorted(set(edges))


def estimate_bins_2d(durations: Sequence[float], tokens: Sequence[int], num_buckets: int,
                     num_token_buckets: int) -> List[Bin]:
    """2D bins from per-cut durations (s) and token counts (see the module docstring)."""
    d, t = np.asarray(durations, dtype=float), np.asarray(tokens, dtype=int)
    if len(d) == 0 or len(d) != len(t):
        raise ValueError("durations and tokens: one of each per cut, at least one cut")
    bins: List[Bin] = []
    lower = -math.inf
    for d_edge in _quantile_edges(d, num_buckets):
        inside = t[(d > lower) & (d <= d_edge)]
        lower = d_edge
        if len(inside) == 0:
            continue
        for t_edge in _quantile_edges(inside, num_token_buckets):
            bins.append((d_edge, int(t_edge)))
    return bins


def bucket_batch_sizes(bins: Sequence[Bin], max_duration: float,
                       max_tokens: Optional[int] = None) -> List[int]:
    """Per bucket: utterances whose padded duration (and padded tokens) fit the budget."""
    sizes = []
    for d_edge, t_edge in bins:
        b = max_duration / max(d_edge, 1e-6)
        if max_tokens is not None:
            b = min(b, max_tokens / max(t_edge, 1))
        sizes.append(max(1, int(b)))
    return sizes


def select_bin(bins: Sequence[Bin], duration: float, tokens: int) -> int:
    """The first bin holding ``(duration, tokens)``; the last when none does."""
    for i, (d_edge, t_edge) in enumerate(bins):
        if duration <= d_edge and tokens <= t_edge:
            return i
    return len(bins) - 1


@dataclass
class Bucket2DConstraint(SamplingConstraint):
    """Fixed batch size per 2D bucket (see the module docstring)."""

    bins: List[Bin]
    batch_sizes: List[int]
    current_bucket: Optional[int] = None
    num_cuts: int = 0
    #: ``cut -> tokens`` (default: ``custom["num_tokens"]``; the loader: a TokenCounter)
    tokens_of: Optional[Callable[[Any], int]] = None

    def __post_init__(self) -> None:
        self.bins = [(float(d), int(t)) for d, t in self.bins]
        if len(self.batch_sizes) != len(self.bins):
            raise ValueError("one batch size per 2D bin is needed")

    def select_bucket(self, buckets: Any, example: Any = None, example_len: Any = None) -> int:
        count = self.tokens_of or num_tokens
        return select_bin(self.bins, example.duration, count(example))

    def add(self, example: Any) -> None:
        bucket = self.select_bucket(self.bins, example)
        if self.current_bucket is None:
            self.current_bucket = bucket
        self.num_cuts += 1

    def exceeded(self) -> bool:
        return self.current_bucket is not None and \
            self.num_cuts > self.batch_sizes[self.current_bucket]

    def close_to_exceeding(self) -> bool:
        return self.current_bucket is not None and \
            self.num_cuts >= self.batch_sizes[self.current_bucket]

    def reset(self) -> None:
        self.current_bucket = None
        self.num_cuts = 0

    def measure_length(self, example: Any) -> float:
        return example.duration


def padding(batches: Iterable[Sequence[Any]]) -> Tuple[float, float]:
    """``(target padding, audio padding)``: the padded share of ``B x longest`` tokens and
    seconds over all batches."""
    tok_pad = tok_all = dur_pad = dur_all = 0.0
    for b in batches:
        toks = [num_tokens(c) for c in b]
        durs = [c.duration for c in b]
        tok_all += len(b) * max(toks)
        tok_pad += len(b) * max(toks) - sum(toks)
        dur_all += len(b) * max(durs)
        dur_pad += len(b) * max(durs) - sum(durs)
    return tok_pad / max(tok_all, 1e-9), dur_pad / max(dur_all, 1e-9)


def loader_constraint_2d(lconf: Any, tokenizer: Any) -> Optional[Tuple[List[Bin],
                                                                         Bucket2DConstraint]]:
    """``(bins, constraint)`` from ``lhotse_conf.bucket_bins_2d`` /
    ``bucket_batch_sizes_2d`` (None when not set), counting tokens with ``tokenizer``."""
    bins = getattr(lconf, "bucket_bins_2d", None)
    if not bins:
        return None
    if tokenizer is None:
        raise ValueError("lhotse_conf.bucket_bins_2d needs a tokenizer (tokens are a bin axis)")
    pairs = [(float(d), int(t)) for d, t in bins]
    if pairs != sorted(pairs):
        raise ValueError("lhotse_conf.bucket_bins_2d must be sorted (as estimate-bins prints)")
    sizes = getattr(lconf, "bucket_batch_sizes_2d", None)
    if not sizes or len(sizes) != len(pairs):
        raise ValueError("lhotse_conf.bucket_batch_sizes_2d: one batch size per 2D bin")
    return pairs, Bucket2DConstraint(pairs, [int(x) for x in sizes],
                                     tokens_of=TokenCounter(tokenizer))
