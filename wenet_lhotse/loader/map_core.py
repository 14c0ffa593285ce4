"""The set-up every map-style speech sampler shares: sources opened as positioned
readers and muxed, bucket edges and the batch constraint from metadata, the resumable
sampler over them. One implementation for map training (all sources mixed by cut),
cv/infer plans (the same mux, read once) and mixing by batch (one sampler per speech
source, :mod:`.mixed`).
"""

from __future__ import annotations

import logging
from typing import Any, Dict, List, Optional, Sequence, Tuple

from wenet_lhotse.loader.bins import bins_and_budget, split_lengths
from wenet_lhotse.loader.constraints import batch_constraint
from wenet_lhotse.loader.mux import PositionedStream, ResumableMux
from wenet_lhotse.loader.sampler import ResumableBucketingSampler
from wenet_lhotse.loader.source_readers import map_reader
from wenet_lhotse.sources.spec import SourceSpec

logger = logging.getLogger(__name__)


def snapshot_depth(plan: Any) -> int:
    """How many batches back the sampler keeps a snapshot: at least the DataLoader's
    prefetch depth (``num_workers x prefetch_factor``) and ``lhotse_conf.snapshot_depth``."""
    nw = plan.num_workers
    return max(plan.cfg.lhotse.snapshot_depth, nw * (plan.prefetch_factor or 2) + 4 if nw else 4)


def speech_batching(plan: Any, specs: Sequence[SourceSpec], transforms: Sequence[Any],
                    seed: int, *, split: str, light: bool, two_d: Optional[Tuple] = None,
                    indexes: Optional[Dict[int, Any]] = None, weights: Sequence[float] = (),
                    stop_early: bool = False) -> Tuple[ResumableMux, List[float], Any, str]:
    """``(mux, bucket edges, constraint, formula)`` for ``specs`` (a
    :class:`~.build.LoaderPlan`'s sources, or one of them): each source opened as a
    positioned reader (read here once when held in memory), muxed by ``weights``
    (default: equal), the edges and budget from its metadata
    (:func:`~.bins.bins_and_budget`), WeNet's ``batch_conf`` as the constraint --
    or ``two_d``'s 2D buckets (:func:`~.constraint2d.loader_constraint_2d`).
    ``indexes``: source number -> its shard index; ``light``: metadata-only cuts."""
    cfg, lconf = plan.cfg, plan.cfg.lhotse
    indexes = indexes or {}
    with plan.reading_once():  # a source held in memory is read here, once
        streams = [PositionedStream(map_reader(s, cfg, seed, plan.policy, light=light,
                                               index=indexes.get(i)), tf)
                   for i, (s, tf) in enumerate(zip(specs, transforms))]
    mux = ResumableMux(streams, list(weights) or [1.0] * len(streams), seed=seed,
                       stop_early=stop_early)
    mux.start(0)
    lengths = split_lengths(cfg, split, seed)
    bins, max_duration, formula = bins_and_budget(
        mux, cfg, lconf.num_cuts_for_bins_estimate, list(specs), lengths)
    constraint = batch_constraint(cfg.batching, cfg.dataset_conf, split=split, seed=seed,
                                  max_duration=max_duration,
                                  quadratic_duration=lconf.quadratic_duration, lengths=lengths)
    if two_d is not None:  # (issues 22, 31)
        bins, constraint = two_d[0], two_d[1]
        formula = f"2D buckets {len(bins)} (duration x tokens), fixed sizes"
    return mux, bins, constraint, formula


def speech_sampler(plan: Any, mux: ResumableMux, bins: List[float], constraint: Any,
                   seed: int, *, buffer_size: int, wenet_workers: int = 1
                   ) -> ResumableBucketingSampler:
    """The resumable training sampler over ``mux`` for this rank, with a snapshot for
    every batch the DataLoader may have prefetched (:func:`snapshot_depth`)."""
    return ResumableBucketingSampler(
        mux, duration_bins=bins, constraint=constraint, shuffle=plan.cfg.shuffle,
        buffer_size=buffer_size, world_size=plan.world_size, rank=plan.rank, seed=seed,
        snapshot_depth=snapshot_depth(plan), wenet_workers=wenet_workers)
