"""Sampling by 2D bins (:mod:`.bins2d`): bucket selection, the batch constraint, the
optional tokens-per-second filter, and their ``lhotse_conf`` keys.

* :func:`select_bin`: *lenient* (default) -- the first bin (in the sorted order) holding
  both the cut's duration and its token count, so a cut with many tokens for its duration
  moves to a longer duration bucket (more audio padding, no token overflow); *strict*
  (NeMo's ``strict_2d``, ``lhotse_conf.bucket_strict_2d``) -- only the sub-buckets of the
  cut's own duration bucket. Lhotse 1.33 has no 2D constraint (NeMo's
  ``FixedBucketBatchSizeConstraint2D`` lives in NeMo); this one follows its selection. A
  cut no bin holds goes to the last bin (lenient) or its duration bucket's last bin
  (strict) -- unless the filter removes it.
* :class:`Bucket2DConstraint`: a Lhotse ``SamplingConstraint`` with a fixed batch size
  per bin and, when given, hard caps ``max_duration`` (padded seconds) and ``max_tokens``
  (padded output tokens). A batch holding cuts of several bins (an epoch's merged
  remainders, :mod:`.bucketing`) is held to the *smallest* batch size among them, so the
  batch size of every bin holds for every batch (the per-bucket size of its first cut let
  a merged batch reach 1.68x its budget, issue 31).
* :class:`TpsFilter`: NeMo's ``min_tps``/``max_tps`` (tokens per second; ``max_tps`` one
  number, or one per bin as ``estimate-bins`` prints it, as NeMo's per-bucket list):
  cuts outside are removed before sampling and counted as ``filtered`` in the epoch
  ledger (off unless set: WeNet trains every cut its ``filter_conf`` keeps).

Durations are the cuts' own (before speed perturbation).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from lhotse import CutSet
from lhotse.dataset.sampling.base import SamplingConstraint

from wenet_lhotse.errors import WenetConfigError
from wenet_lhotse.loader.bins2d import Bin, TokenCounter, num_tokens, select_bin


@dataclass
class Bucket2DConstraint(SamplingConstraint):
    """Fixed batch size per 2D bin, optional hard caps (see the module docstring)."""

    bins: List[Bin]
    batch_sizes: List[int]
    #: ``cut -> tokens`` (default: ``custom["num_tokens"]``; the loader: a TokenCounter)
    tokens_of: Optional[Callable[[Any], int]] = None
    strict: bool = False
    max_duration: Optional[float] = None  # seconds of padded audio per batch
    max_tokens: Optional[int] = None  # padded output tokens per batch
    current_bucket: Optional[int] = None
    num_cuts: int = 0
    limit: int = 0  # the smallest batch size among the bins of the batch's cuts
    longest: float = 0.0  # seconds
    most_tokens: int = 0
    #: cut id -> bin (shared by copies: a bucketer measures each cut many times)
    _bin_of: Dict[str, int] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.bins = [(float(d), int(t)) for d, t in self.bins]
        if len(self.batch_sizes) != len(self.bins):
            raise ValueError("one batch size per 2D bin is needed")

    def _tokens(self, example: Any) -> int:
        return (self.tokens_of or num_tokens)(example)

    def select_bucket(self, buckets: Any, example: Any = None, example_len: Any = None) -> int:
        i = self._bin_of.get(example.id)
        if i is None:
            i = select_bin(self.bins, example.duration, self._tokens(example), self.strict)
            self._bin_of[example.id] = i
        return i

    def add(self, example: Any) -> None:
        bucket = self.select_bucket(self.bins, example)
        size = self.batch_sizes[bucket]
        if self.current_bucket is None:
            self.current_bucket, self.limit = bucket, size
        self.limit = min(self.limit, size)
        self.num_cuts += 1
        self.longest = max(self.longest, float(example.duration))
        self.most_tokens = max(self.most_tokens, self._tokens(example))

    def _over(self, n: int, longest: float, most: int) -> bool:
        return (n > self.limit
                or (self.max_duration is not None and n > 1 and n * longest > self.max_duration)
                or (self.max_tokens is not None and n > 1 and n * most > self.max_tokens))

    def exceeded(self) -> bool:
        return self.current_bucket is not None and \
            self._over(self.num_cuts, self.longest, self.most_tokens)

    def close_to_exceeding(self) -> bool:
        """True when one more cut of the current bin (at most its edges) would exceed."""
        if self.current_bucket is None:
            return False
        d_edge, t_edge = self.bins[self.current_bucket]
        return self._over(self.num_cuts + 1, max(self.longest, d_edge),
                          max(self.most_tokens, t_edge))

    def reset(self) -> None:
        self.current_bucket = None
        self.num_cuts = self.limit = self.most_tokens = 0
        self.longest = 0.0

    def measure_length(self, example: Any) -> float:
        return example.duration

    def merge_key(self, example: Any) -> Tuple[int, int, float]:
        """How an epoch's remainders are ordered before they are cut into batches
        (:mod:`.bucketing`): by their bin's batch size (largest first), bin, duration --
        so a batch seldom mixes bins (a mix is held to its smallest batch size)."""
        i = self.select_bucket(self.bins, example)
        return (-self.batch_sizes[i], i, float(example.duration))


class TpsFilter:
    """Keep a cut when ``min_tps <= tokens / duration <= max_tps`` (its bin's, when
    ``max_tps`` is a list); ``filtered`` counts the others (see the module docstring)."""

    def __init__(self, bins: Sequence[Bin], tokens_of: Callable[[Any], int],
                 min_tps: Optional[float] = None,
                 max_tps: Union[None, float, Sequence[float]] = None,
                 strict: bool = False) -> None:
        if isinstance(max_tps, (list, tuple)) and len(max_tps) != len(bins):
            raise ValueError("lhotse_conf.max_tps: one number, or one per 2D bin")
        self.bins, self.tokens_of, self.strict = list(bins), tokens_of, strict
        self.min_tps, self.max_tps = min_tps, max_tps
        self.filtered = 0

    def keep(self, cut: Any) -> bool:
        tokens = self.tokens_of(cut)
        tps = tokens / max(float(cut.duration), 1e-6)
        top = self.max_tps
        if isinstance(top, (list, tuple)):
            top = top[select_bin(self.bins, cut.duration, tokens, self.strict)]
        ok = ((self.min_tps is None or tps >= self.min_tps)
              and (top is None or tps <= float(top)))
        if not ok:
            self.filtered += 1
        return ok


class FilteredTransform:
    """A source's cut transform (:class:`~.wenet_dataset.CutTransform`), then a
    :class:`TpsFilter`; ``filtered`` is both counts (what the epoch ledger reads)."""

    def __init__(self, inner: Any, tps: TpsFilter) -> None:
        self.inner, self.tps = inner, tps
        self.tokenizer = getattr(inner, "tokenizer", None)

    @property
    def filtered(self) -> int:
        return getattr(self.inner, "filtered", 0) + self.tps.filtered

    def __call__(self, cuts: CutSet) -> CutSet:
        if self.inner is not None:
            cuts = self.inner(cuts)
        return cuts.filter(self.tps.keep)


#: the lhotse_conf keys that only mean something with bucket_bins_2d
KEYS_2D = ("bucket_batch_sizes_2d", "bucket_strict_2d", "bucket_max_tokens_2d", "min_tps",
           "max_tps")


def check_2d_keys(lconf: Any) -> None:
    """Refuse a 2D-only key set without ``bucket_bins_2d`` (one line naming the key)."""
    if not getattr(lconf, "bucket_bins_2d", None):
        for k in KEYS_2D:
            if getattr(lconf, k, None) not in (None, False):
                raise WenetConfigError(f"lhotse_conf.{k}", "applies to 2D buckets: set "
                                       "lhotse_conf.bucket_bins_2d (wenet-lhotse estimate-bins)")


def loader_constraint_2d(lconf: Any, tokenizer: Any) -> Optional[
        Tuple[List[Bin], Bucket2DConstraint, Optional[TpsFilter]]]:
    """``(bins, constraint, filter)`` from ``lhotse_conf`` (None without
    ``bucket_bins_2d``), counting tokens with ``tokenizer``. Batch sizes: the given
    ``bucket_batch_sizes_2d``, else from ``max_duration`` (and ``bucket_max_tokens_2d``);
    both caps hold for every batch when set. ``filter`` is None unless ``min_tps`` or
    ``max_tps`` is set."""
    from wenet_lhotse.loader.bins2d import bucket_batch_sizes

    bins = getattr(lconf, "bucket_bins_2d", None)
    if not bins:
        check_2d_keys(lconf)
        return None
    if tokenizer is None:
        raise ValueError("lhotse_conf.bucket_bins_2d needs a tokenizer (tokens are a bin axis)")
    pairs = [(float(d), int(t)) for d, t in bins]
    if pairs != sorted(pairs):
        raise ValueError("lhotse_conf.bucket_bins_2d must be sorted (as estimate-bins prints)")
    sizes = getattr(lconf, "bucket_batch_sizes_2d", None)
    max_tokens = getattr(lconf, "bucket_max_tokens_2d", None)
    if not sizes and lconf.max_duration is not None:
        sizes = bucket_batch_sizes(pairs, lconf.max_duration, max_tokens)
    if not sizes or len(sizes) != len(pairs):
        raise ValueError("lhotse_conf.bucket_batch_sizes_2d: one batch size per 2D bin "
                         "(or lhotse_conf.max_duration to derive them)")
    strict = bool(getattr(lconf, "bucket_strict_2d", False))
    counter = TokenCounter(tokenizer)
    constraint = Bucket2DConstraint(pairs, [int(x) for x in sizes], tokens_of=counter,
                                    strict=strict, max_duration=lconf.max_duration,
                                    max_tokens=max_tokens)
    min_tps, max_tps = getattr(lconf, "min_tps", None), getattr(lconf, "max_tps", None)
    tps = None
    if min_tps is not None or max_tps is not None:
        tps = TpsFilter(pairs, counter, min_tps, max_tps, strict)
    return pairs, constraint, tps


def tps_transforms(transforms: Sequence[Any], two_d: Any, training: bool) -> List[Any]:
    """The sources' transforms, each followed by its own copy of ``two_d``'s
    :class:`TpsFilter` when there is one and the split trains (cv keeps every cut)."""
    tps = two_d[2] if two_d is not None else None
    if tps is None or not training:
        return list(transforms)
    return [FilteredTransform(tf, TpsFilter(tps.bins, tps.tokens_of, tps.min_tps,
                                            tps.max_tps, tps.strict)) for tf in transforms]
