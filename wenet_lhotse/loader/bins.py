"""Bucket edges and the batch budget of a loader, from the first cuts' metadata.

The edges are compared with each cut's length *after* speed perturbation (the
constraints' ``measure_length``), so they are estimated from those lengths too.

* Map-style loading estimates them in the training process from the first
  ``num_cuts_for_bins_estimate`` cuts' metadata (:func:`bins_and_budget`, epoch-0 speeds).
* Streamed loading reads nothing in the training process for them: as Lhotse's
  ``DynamicBucketingSampler`` without ``duration_bins`` estimates them from the first cuts
  it reads, each DataLoader worker estimates its own from the first
  ``streamed.INITIAL_FILL`` cuts of its epoch -- the cuts it reads anyway before its first
  batch, peeked at and handed on to its sampler, never read twice
  (:class:`WorkerEdges`). They depend only on the worker's share of the tars, the seed
  and the epoch, so a restored epoch gets the same edges and the same batches. Only
  batching by duration without ``max_duration`` still reads the first cuts here (every
  worker must share one budget, from their mean duration); ``duration_bins`` given or
  WeNet's ``batch_type: bucket`` need nothing read at all.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from itertools import islice
from typing import Iterator, List, Optional, Sequence, Tuple

from lhotse.cut import Cut
from lhotse.dataset.sampling.dynamic_bucketing import estimate_duration_buckets

from wenet_lhotse.dataset.splits import split_rules
from wenet_lhotse.features.recipe import CutLengths, cut_lengths_from_wenet_conf
from wenet_lhotse.loader.config import LoaderConfig
from wenet_lhotse.sources import SourceSpec

logger = logging.getLogger(__name__)

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


def needs_sample(cfg: LoaderConfig) -> Tuple[bool, bool]:
    """``(edges, mean)``: whether bucket edges must be estimated from cuts (no
    ``duration_bins`` given, not WeNet's ``batch_type: bucket``), and whether the batch
    budget needs the mean duration (batching by duration without ``max_duration``)."""
    lconf, batching = cfg.lhotse, cfg.batching
    edges = lconf.duration_bins is None and not _bucket_type(cfg)
    return edges, batching.by == "duration" and batching.max_duration is None


def _bucket_type(cfg: LoaderConfig) -> bool:
    batching = cfg.batching
    return batching.by == "wenet" and batching.batch_conf["batch_type"] == "bucket"


def given_bins(cfg: LoaderConfig) -> Optional[List[float]]:
    """The edges (seconds) the config gives: ``duration_bins``, or WeNet's buckets
    (``bucket_boundaries``, frames, in seconds for logs); ``None`` when to be estimated."""
    if _bucket_type(cfg):
        return [b * cfg.frame_shift_ms / 1000.0
                for b in cfg.batching.batch_conf["bucket_boundaries"]]
    if cfg.lhotse.duration_bins is not None:
        return [float(b) for b in cfg.lhotse.duration_bins]
    return None


def budget_and_formula(cfg: LoaderConfig, mean: float) -> Tuple[Optional[float], str]:
    """The duration budget (seconds; ``None`` when batching by WeNet's numbers) and how
    batches are formed (for logs), given the mean duration (seconds; unused unless
    :func:`needs_sample` says so)."""
    budget = cfg.batching.resolve(mean)
    formula = cfg.batching.explain(mean)
    if budget is not None:
        formula = f"max_duration {budget:.1f} s ({formula or 'given'})"
    return budget, formula


def edges_from_sample(sample: Sequence[Cut], n: int, cfg: LoaderConfig,
                      lengths: CutLengths) -> List[float]:
    """Edges (seconds) from ``sample``, the first cuts (at most ``n``) of the data. A small
    data set (fewer than ``n`` cuts) gets fewer buckets: each should hold a full batch."""
    if not sample:
        return []
    mean = sum(c.duration for c in sample) / len(sample)
    per_batch = cfg.batching.utterances_per_batch(mean, cfg.frame_shift_ms)
    num = cfg.lhotse.num_buckets
    cap = num if len(sample) >= n else int(len(sample) / per_batch)
    return estimate_bins(sample, min(num, cap), lengths)


def log_edges(bins: Sequence[float], where: str = "") -> None:
    logger.info("duration_bins%s (pass them as lhotse_conf.duration_bins to skip this "
                "estimate): %s", where, [round(b, 3) for b in bins])


def bins_and_budget(cuts: Iterator[Cut], cfg: LoaderConfig, n: int, specs: Sequence[SourceSpec],
                     lengths: CutLengths) -> Tuple[List[float], Optional[float], str]:
    """Bucket edges (seconds), the duration budget (seconds; ``None`` when batching by
    WeNet's numbers) and how batches are formed (for logs), from the metadata of the first
    ``n`` cuts -- only read when needed (:func:`needs_sample`; one cut otherwise, to
    check there is one)."""
    need_edges, need_mean = needs_sample(cfg)
    sample = list(islice(cuts, n if need_edges or need_mean else 1))
    if not sample:
        raise ValueError(f"no cuts in {[s.name for s in specs]} (after filter_conf)")
    budget, formula = budget_and_formula(cfg, sum(c.duration for c in sample) / len(sample))
    bins = given_bins(cfg)
    if bins is None:
        bins = edges_from_sample(sample, n, cfg, lengths)
        log_edges(bins)
    return bins, budget, formula


@dataclass
class WorkerEdges:
    """How a streamed worker estimates its bucket edges from the first :attr:`num_cuts`
    cuts of its epoch (see the module docstring); picklable, sent to the workers with
    the sampler's arguments. ``lengths`` is the constraint's own (sharing its cache of
    per-cut lengths) or, batching by duration, the split's."""

    cfg: LoaderConfig
    num_cuts: int
    lengths: CutLengths

    def edges(self, head: Sequence[Cut], epoch: int) -> List[float]:
        """The edges (seconds) for ``head``, the epoch's first cuts, with the epoch's
        speed factors."""
        self.lengths.set_epoch(epoch)
        return edges_from_sample(head, self.num_cuts, self.cfg, self.lengths)


def split_lengths(cfg: LoaderConfig, split: str, seed: int) -> CutLengths:
    """The lengths the split's batching measures (speed perturbation in training)."""
    return cut_lengths_from_wenet_conf(cfg.dataset_conf, train=split_rules(split).augment,
                                       seed=seed)


#: how far an edge moves each epoch, as a share of the gap to its neighbour (< 0.5 keeps
#: the edges in order)
EDGE_JITTER = 0.45


def epoch_bins(bins: Sequence[float], seed: int, epoch: int) -> List[float]:
    """``bins`` with each edge moved, for this epoch, by a random share (at most
    :data:`EDGE_JITTER`) of the gap to its neighbour on the side it moves to (the same
    on every rank: a function of ``seed`` and ``epoch``).

    Why: when the bucket buffer holds the whole corpus (a few hundred or thousand
    utterances; ``buffer_size`` is 20,000), fixed edges put the same utterances in the
    same bucket every epoch, and a bucket holding one batch's worth, or the sorted
    remainders, gives the same batch every epoch (12-38 % of batches repeated; WeNet's
    batches vary with its shuffle buffer and speed perturbation). Moved edges regroup
    the neighbours each epoch; buckets stay as narrow (padding does not change).
    Edges that are not numbers (2D buckets) are kept."""
    edges = list(bins)
    if len(edges) < 2 or not all(isinstance(e, (int, float)) for e in edges):
        return edges
    import random

    rng = random.Random(f"bins {seed} {epoch}")
    out = []
    for i, e in enumerate(edges):
        u = rng.uniform(-EDGE_JITTER, EDGE_JITTER)
        lo = edges[i - 1] if i else e - (edges[1] - edges[0])
        hi = edges[i + 1] if i + 1 < len(edges) else e + (edges[-1] - edges[-2])
        out.append(e + u * ((hi - e) if u > 0 else (e - lo)))
    return out
