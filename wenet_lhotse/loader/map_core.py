"""The map core: what map-style loading samples from. Every map-style loader is one
:class:`~.map_items.EpochTaggedSampler` over one of these plans of its batches:

* :func:`shuffled_buckets` (training): sources as positioned readers, muxed by cut,
  the resumable bucketing sampler over them;
* :func:`in_list_order` (WeNet's deterministic order, :mod:`.in_order`): the same
  batches every epoch, as WeNet's own loader makes them;
* :func:`whole_set` (cv/infer): the whole set once, bucketed, planned at first use;
* mixing by batch (:func:`~.mixed.mixed_batches`): one :func:`speech_sampler` per
  speech source (and text samplers), a batch's source drawn by weight.

The set-up they share is written once: :func:`speech_batching` (readers, mux, bucket
edges and the batch constraint from metadata) and :func:`speech_sampler`.
"""

from __future__ import annotations

import logging
import warnings
from typing import Any, Dict, List, Optional, Sequence, Tuple

from lhotse import CutSet

from wenet_lhotse.formats.split import reader_share
from wenet_lhotse.loader.bins import bins_and_budget, split_lengths
from wenet_lhotse.loader.bucketing import BucketingSampler
from wenet_lhotse.loader.constraints import batch_constraint
from wenet_lhotse.loader.distributed import plan_partition
from wenet_lhotse.loader.in_order import in_order_batcher, plan_in_order
from wenet_lhotse.loader.map_items import FixedBatches
from wenet_lhotse.loader.mux import PositionedStream, ResumableMux
from wenet_lhotse.loader.sampler import ResumableBucketingSampler
from wenet_lhotse.loader.source_readers import map_reader
from wenet_lhotse.sources.spec import SourceSpec
from wenet_lhotse.sources.window_order import window_buffer_size

logger = logging.getLogger(__name__)


def prefetched(plan: Any) -> int:
    """Batches torch's DataLoader may hold ahead of the training loop:
    ``num_workers x prefetch_factor`` (its default 2), 0 without workers."""
    return plan.num_workers * (plan.prefetch_factor or 2)


def snapshot_depth(plan: Any) -> int:
    """How many batches back the sampler keeps a snapshot: at least the DataLoader's
    prefetch depth (:func:`prefetched`, plus 4) and ``lhotse_conf.snapshot_depth``."""
    return max(plan.cfg.lhotse.snapshot_depth, prefetched(plan) + 4)


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
        snapshot_depth=snapshot_depth(plan), wenet_workers=wenet_workers,
        release_depth=prefetched(plan) + 1)  # a batch is read once past the prefetched


def _all_sources(plan: Any, transforms: Sequence[Any], two_d: Optional[Tuple]
                 ) -> Tuple[ResumableMux, List[float], Any]:
    """:func:`speech_batching` over all of ``plan``'s sources, mixed by cut (training
    reads metadata-only cuts: the sampler builds only its rank's emitted batches)."""
    cfg = plan.cfg
    mux, bins, constraint, formula = speech_batching(
        plan, plan.specs, transforms, plan.seed, split=plan.split,
        light=cfg.rules.training, two_d=two_d, indexes=plan.indexes, weights=plan.weights,
        stop_early=cfg.lhotse.mux_stop_early)
    logger.info("%s batches: %s, %d buckets, %s", plan.split, formula, len(bins) + 1, "map")
    return mux, bins, constraint


def shuffled_buckets(plan: Any, transforms: Sequence[Any], two_d: Optional[Tuple]
                     ) -> ResumableBucketingSampler:
    """The training plan: every source muxed by cut, batches from shuffled buckets, a
    new draw each epoch, WeNet's step count with static batches."""
    cfg = plan.cfg
    mux, bins, constraint = _all_sources(plan, transforms, two_d)
    return speech_sampler(
        plan, mux, bins, constraint, plan.seed,
        buffer_size=window_buffer_size(plan.indexes, cfg.lhotse.read_window_mb,
                                       cfg.buffer_size),
        wenet_workers=max(plan.num_workers, 1))  # WeNet's step count


def in_list_order(plan: Any) -> FixedBatches:
    """WeNet's deterministic order (:mod:`.in_order`): its batches, planned once per
    rank at the first ``iter()``."""
    cfg, specs = plan.cfg, plan.specs

    def batches() -> List[CutSet]:
        with plan.reading_once():
            reader = map_reader(specs[0], cfg, plan.seed, plan.policy,
                                index=plan.indexes.get(0))
            cuts, _ = PositionedStream(reader).open(0)
            return plan_in_order(cuts, plan.transforms[0], in_order_batcher(cfg, plan.seed),
                                 plan.world_size, plan.rank, plan.num_workers)

    logger.info("train batches: %s, in list order (shuffle, sort and list_shuffle "
                "off), split across ranks and workers as WeNet's",
                cfg.batching.batch_conf["batch_type"])
    return FixedBatches(batches)


def whole_set(plan: Any, transforms: Sequence[Any], two_d: Optional[Tuple]) -> FixedBatches:
    """The cv/infer plan: the whole set once, bucketed without shuffling, every pass
    the same (this rank's share with ``lhotse_conf.cv_partition``). Planned at the
    first ``iter()`` or ``len()``: a cv loader reads nothing until used."""
    cfg, ws, rk = plan.cfg, plan.world_size, plan.rank
    for spec in plan.specs:  # a wrong path fails now, not when the first cv pass starts
        spec.check_local_paths()

    def batches() -> List[CutSet]:
        with plan.reading_once(), warnings.catch_warnings():
            mux, bins, constraint = _all_sources(plan, transforms, two_d)
            mux.start(0)
            warnings.simplefilter("ignore")  # an eager CutSet is fine for a one-off plan
            out = list(BucketingSampler(
                CutSet.from_cuts(list(mux)), constraint=constraint, duration_bins=bins,
                shuffle=False, world_size=1, rank=0, buffer_size=cfg.buffer_size))
        if cfg.lhotse.cv_partition:
            out = reader_share(plan_partition(out, ws), rk, ws)
        return out

    return FixedBatches(batches, transforms=transforms)
