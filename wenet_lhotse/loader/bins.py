"""Bucket edges and the batch budget of a loader, from the first cuts' metadata.

The edges are compared with each cut's length *after* speed perturbation (the
constraints' ``measure_length``), so they are estimated from those lengths too (the
epoch-0 factors of the sampled cuts). Streamed sources read their first tars, audio
included, in the training process before any worker starts: they estimate from at most
:data:`STREAMED_BINS_CUTS` cuts.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from itertools import islice
from typing import Iterator, List, Optional, Sequence, Tuple

from lhotse.cut import Cut
from lhotse.dataset.sampling.dynamic_bucketing import estimate_duration_buckets

from wenet_lhotse.loader.config import LoaderConfig
from wenet_lhotse.loader.constraints import CutLengths, cut_lengths_from_wenet_conf
from wenet_lhotse.sources import SourceSpec

logger = logging.getLogger(__name__)

#: Cuts of the first tars that streamed sources estimate bucket edges from (2,000, read
#: with their audio, took most of the time to the first batch).
STREAMED_BINS_CUTS = 300


def estimate_bins(cuts: Sequence[Cut], num_buckets: int,
                  lengths: Optional[CutLengths] = None) -> List[float]:
    """Bucket edges (seconds) from cut durations (metadata) -- after speed perturbation,
    as the sampler measures cuts, when ``lengths`` has speeds; fewer buckets for tiny sets."""
    n = min(num_buckets, len(cuts) // 2)
    if n < 2:
        return []
    measure = _Seconds(lengths) if lengths is not None and lengths.speeds else None
    return [float(b) for b in estimate_duration_buckets(cuts, num_buckets=n, constraint=measure)]


@dataclass
class _Seconds:
    """What Lhotse's ``estimate_duration_buckets`` asks of a constraint."""

    lengths: CutLengths

    def measure_length(self, cut: Cut) -> float:
        return self.lengths.seconds(cut)


def bins_and_budget(cuts: Iterator[Cut], cfg: LoaderConfig, n: int, specs: Sequence[SourceSpec],
                     lengths: CutLengths) -> Tuple[List[float], Optional[float], str]:
    """Bucket edges (seconds), the duration budget (seconds; ``None`` when batching by
    WeNet's numbers) and how batches are formed (for logs), from the metadata of the first
    ``n`` cuts -- only read when needed (no ``duration_bins`` given, or a static
    ``batch_size`` to turn into seconds). With WeNet's ``batch_type: bucket`` the buckets
    are WeNet's (``bucket_boundaries``)."""
    lconf, batching = cfg.lhotse, cfg.batching
    bucket_type = batching.by == "wenet" and batching.batch_conf["batch_type"] == "bucket"
    need = (lconf.duration_bins is None and not bucket_type) or (
        batching.by == "duration" and batching.max_duration is None)
    sample = list(islice(cuts, n if need else 1))
    if not sample:
        raise ValueError(f"no cuts in {[s.name for s in specs]} (after filter_conf)")
    mean = sum(c.duration for c in sample) / len(sample)
    budget = batching.resolve(mean)
    formula = batching.explain(mean)
    if budget is not None:
        formula = f"max_duration {budget:.1f} s ({formula or 'given'})"
    if bucket_type:
        # sampling buckets = WeNet's buckets (their edges, frames, in seconds for the log)
        bins = [b * cfg.frame_shift_ms / 1000.0 for b in batching.batch_conf["bucket_boundaries"]]
    elif lconf.duration_bins is not None:
        bins = [float(b) for b in lconf.duration_bins]
    else:
        # A small data set gets fewer buckets: each should hold at least a full batch
        # (not known to be small when the sample stopped at n cuts).
        per_batch = batching.utterances_per_batch(mean, cfg.frame_shift_ms)
        cap = lconf.num_buckets if len(sample) >= n else int(len(sample) / per_batch)
        bins = estimate_bins(sample, min(lconf.num_buckets, cap), lengths)
        logger.info("duration_bins (pass them as lhotse_conf.duration_bins to skip this "
                    "estimate): %s", [round(b, 3) for b in bins])
    return bins, budget, formula


def split_lengths(cfg: LoaderConfig, split: str, seed: int) -> CutLengths:
    """The lengths the split's batching measures (speed perturbation in training)."""
    return cut_lengths_from_wenet_conf(cfg.dataset_conf, train=split == "train", seed=seed)
