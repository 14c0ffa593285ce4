"""2D buckets for speech: (duration, output tokens), estimated from metadata.

In speech-LLM and attention-decoder training the text side sets much of the memory; 1D
duration buckets put a 2 s utterance with 5 tokens next to a 2 s one with 40, and every
target is padded to the longest. 2D buckets split each duration bucket by token count
(NeMo's ``bucket_duration_bins`` as ``[duration, tokens]`` pairs).

:func:`estimate_bins_2d`, after NeMo's ``scripts/speech_recognition/estimate_duration_bins_2d.py``
(equal total duration per duration bucket; tokens-per-second outliers above ``sigma``
standard deviations dropped per duration bucket before its token edges are set) and tighter
where we measured it (``bench/bucketing_2d.py``, docs/performance.md):

* duration edges: equal *total duration* per bucket (NeMo's: more, narrower buckets among
  long cuts, where padding costs most), each edge the longest cut of its bucket (NeMo's is
  the first cut of the next one); cuts of equal duration never straddle an edge;
* token edges within a duration bucket: the split that minimises the padded tokens
  ``sum(edge - tokens)`` of its (non-outlier) cuts, solved exactly over the bucket's
  distinct token counts (NeMo's: equal total tokens per sub-bucket). The padded tokens
  also set the batch count under a token cap (batch size ``max_tokens / edge``);
* per bin, ``max_tps``: the fastest non-outlier tokens per second of its duration bucket
  (NeMo's per-bucket ``max_tps``), for the optional outlier filter
  (:mod:`~.constraint2d`).

:func:`bucket_batch_sizes`: per bin ``floor(max_duration / duration edge)``, capped by
``max_tokens / token edge`` when a token budget is given (NeMo's OOMptimizer searches these
on a GPU). :func:`padding` and :func:`expected` measure a batching (padding per dimension,
batches).

Token counts come from ``cut.custom["num_tokens"]`` (see :func:`with_num_tokens`) or, in
the loader, from a :class:`TokenCounter` (WeNet's tokenizer, once per cut id): bucketing
reads no audio.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from typing import Any, Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np
from lhotse.utils import fastcopy

from wenet_lhotse.formats.layout import cut_text

Bin = Tuple[float, int]

#: NeMo's ``--token_outlier_threshold`` default: tokens-per-second z-score above which a
#: cut is an outlier of its duration bucket
OUTLIER_SIGMA = 4.0


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


class Bins2D(NamedTuple):
    """What :func:`estimate_bins_2d` finds: ``bins`` ``[(max seconds, max tokens), ...]``
    sorted (by duration edge, then tokens), ``max_tps`` one per bin (tokens per second),
    ``outliers``: cuts of the estimate left out of the token edges (tokens per second
    above ``sigma``)."""

    bins: List[Bin]
    max_tps: List[float]
    outliers: int


def _equal_total_ends(values: np.ndarray, n: int) -> List[int]:
    """End indexes (exclusive) of up to ``n`` groups of the sorted ``values`` with about
    equal sums; a value never straddles two groups."""
    cum = np.cumsum(values)
    ends = []
    for k in range(1, n):
        i = int(np.searchsorted(cum, cum[-1] * k / n, side="left")) + 1
        i = int(np.searchsorted(values, values[min(i, len(values)) - 1], side="right"))
        if i < len(values) and (not ends or i > ends[-1]):
            ends.append(i)
    return ends + [len(values)]


def _best_split(cost: np.ndarray, n: int) -> List[int]:
    """The last index of each of ``n`` consecutive groups of ``0..u-1`` minimising the
    sum of ``cost[first, last]`` (``inf`` below the diagonal): a dynamic programme."""
    u = cost.shape[0]
    n = max(1, min(n, u))
    best = cost[0].copy()  # best[b]: items 0..b in the groups so far
    back: List[np.ndarray] = []
    for _ in range(1, n):
        trial = np.concatenate([[np.inf], best[:-1]])[:, None] + cost  # this group a..b
        arg = np.argmin(trial, axis=0)
        back.append(arg)
        best = trial[arg, np.arange(u)]
    lasts, b = [u - 1], u - 1
    for arg in reversed(back):
        b = int(arg[b]) - 1
        lasts.append(b)
    return sorted(set(lasts))


def _group_cost(per_group: Any, u: int) -> np.ndarray:
    a, b = np.meshgrid(np.arange(u), np.arange(u), indexing="ij")
    return np.where(a <= b, per_group(a, b), np.inf)


def _min_padding_edges(tokens: np.ndarray, n: int) -> List[int]:
    """At most ``n`` upper edges over ``tokens`` (integers) minimising ``sum(edge(t) - t)``,
    ``edge(t)`` the first edge ``>= t``, exactly, over the distinct values."""
    vals, counts = np.unique(tokens, return_counts=True)
    cnt = np.concatenate([[0], np.cumsum(counts)])
    tot = np.concatenate([[0], np.cumsum(counts * vals.astype(float))])
    cost = _group_cost(lambda a, b: (cnt[b + 1] - cnt[a]) * vals[b] - (tot[b + 1] - tot[a]),
                       len(vals))
    return [int(vals[i]) for i in _best_split(cost, n)]


#: candidate duration edges for :func:`_fewest_batches_ends` (quantiles of the durations)
EDGE_CANDIDATES = 1500


def _fewest_batches_ends(d: np.ndarray, n: int, max_duration: float) -> List[int]:
    """End indexes (exclusive) of ``n`` groups of the sorted durations ``d`` minimising the
    expected batches ``sum(cuts / floor(max_duration / edge))``, edges among
    :data:`EDGE_CANDIDATES` quantiles (the last: the longest cut)."""
    vals = np.unique(np.quantile(d, np.linspace(0, 1, EDGE_CANDIDATES), method="higher"))
    cnt = np.concatenate([[0], np.searchsorted(d, vals, side="right")])
    size = np.maximum(1.0, np.floor(max_duration / vals))
    cost = _group_cost(lambda a, b: (cnt[b + 1] - cnt[a]) / size[b], len(vals))
    return [int(cnt[i + 1]) for i in _best_split(cost, n)]


def estimate_bins_2d(durations: Sequence[float], tokens: Sequence[int], num_buckets: int,
                     num_token_buckets: int, sigma: Optional[float] = OUTLIER_SIGMA,
                     max_duration: Optional[float] = None) -> Bins2D:
    """2D bins from per-cut durations (s) and token counts (see the module docstring).
    ``sigma=None`` keeps every cut in the token edges. With ``max_duration`` (the batch
    budget, seconds) the duration edges are the ones giving the fewest batches for it
    instead of equal total duration."""
    d, t = np.asarray(durations, dtype=float), np.asarray(tokens, dtype=int)
    if len(d) == 0 or len(d) != len(t):
        raise ValueError("durations and tokens: one of each per cut, at least one cut")
    order = np.lexsort((t, d))
    d, t = d[order], t[order]
    bins: List[Bin] = []
    max_tps: List[float] = []
    outliers = start = 0
    ends = (_equal_total_ends(d, max(1, num_buckets)) if max_duration is None
            else _fewest_batches_ends(d, num_buckets, max_duration))
    for end in ends:
        dd, tt = d[start:end], t[start:end]
        tps = tt / np.maximum(dd, 1e-6)
        keep = np.ones(len(tt), dtype=bool)
        if sigma is not None and len(tt) > 1 and tps.std() > 0:
            keep = (tps - tps.mean()) / tps.std() <= sigma
        outliers += int((~keep).sum())
        edge = round(float(dd[-1]), 3)
        edge = edge if edge >= dd[-1] else float(dd[-1])
        for t_edge in _min_padding_edges(tt[keep], max(1, num_token_buckets)):
            bins.append((edge, t_edge))
            max_tps.append(round(float(tps[keep].max()), 3))
        start = end
    return Bins2D(bins, max_tps, outliers)


def select_bin(bins: Sequence[Bin], duration: float, tokens: int, strict: bool = False) -> int:
    """The bin of a cut, ``bins`` sorted: *lenient*, the first bin holding both values
    (else the last); *strict* (NeMo's ``strict_2d``), the first of the cut's own duration
    bucket holding its tokens (else that bucket's last)."""
    if strict:
        lo = bisect_left([d for d, _ in bins], duration)
        if lo == len(bins):
            return len(bins) - 1
        edge, hi = bins[lo][0], lo
        while hi + 1 < len(bins) and bins[hi + 1][0] == edge:
            hi += 1
        for i in range(lo, hi + 1):
            if tokens <= bins[i][1]:
                return i
        return hi
    for i, (d_edge, t_edge) in enumerate(bins):
        if duration <= d_edge and tokens <= t_edge:
            return i
    return len(bins) - 1


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


def expected(bins: Sequence[Bin], sizes: Sequence[int], durations: Sequence[float],
             tokens: Sequence[int], strict: bool = False) -> Dict[str, float]:
    """What batching these cuts by these bins should give, without sampling: each cut
    padded to its bin's edges, ``ceil(cuts / size)`` batches per bin. ``{"audio_padding",
    "token_padding"}`` (shares of the padded totals) and ``"batches"``. A bound in the
    sense that batches rarely reach their bin's edges (measured padding is lower)."""
    per_bin = [0] * len(bins)
    dur = pad_d = tok = pad_t = 0.0
    for di, ti in zip(durations, tokens):
        i = select_bin(bins, di, ti, strict=strict)
        per_bin[i] += 1
        e_d, e_t = bins[i][0], max(bins[i][1], ti)
        dur, pad_d = dur + max(e_d, di), pad_d + max(e_d, di) - di
        tok, pad_t = tok + e_t, pad_t + e_t - ti
    batches = sum(math.ceil(n / s) for n, s in zip(per_bin, sizes))
    return {"audio_padding": pad_d / max(dur, 1e-9), "token_padding": pad_t / max(tok, 1e-9),
            "batches": batches}
