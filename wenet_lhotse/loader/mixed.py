"""The training loader that mixes by batch: speech, speech-only and text sources.

Chosen by :func:`~.build.build_dataloader` when a source is ``type: text``,
``transcripts: false`` or ``repeat: true``, or with ``lhotse_conf.mix_by: batch``.
Map-style loading only (tar-shard sources are sampled through their index when they
have one, else held in memory, as map mode does for them): every source gets its own
resumable sampler -- speech: a
:class:`~.sampler.ResumableBucketingSampler` over that source alone, batched by WeNet's
``batch_conf`` (or ``lhotse_conf`` budget); text: a
:class:`~.text_sampler.TextBatchSampler` limited by ``lhotse_conf.max_tokens_in_batch``
-- and :class:`~.batch_mux.BatchMuxSampler` draws the source of each batch by weight.
Batches are dicts of one ``kind`` each (:class:`~wenet_lhotse.dataset.text_batch.KindDataset`).

``loader.sampler.sampler.counts`` holds the batches drawn from each source in the current
epoch (``.names`` their names); :func:`source_shares` turns them into shares.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, List

from wenet_lhotse.loader.batch_mux import BatchMuxSampler
from wenet_lhotse.loader.constraint2d import loader_constraint_2d
from wenet_lhotse.loader.map_core import snapshot_depth, speech_batching, speech_sampler
from wenet_lhotse.loader.sampler import ResumableBucketingSampler
from wenet_lhotse.loader.text_sampler import TextBatchSampler
from wenet_lhotse.loader.wenet_dataset import CutTransform
from wenet_lhotse.sources.registry import get_kind
from wenet_lhotse.sources.spec import SourceSpec
from wenet_lhotse.sources.text import read_text_source
from wenet_lhotse.sources.window_order import window_buffer_size

logger = logging.getLogger(__name__)

#: a different seed per source (bucket shuffles do not move in step)
SEED_STRIDE = 7919


def mixes_by_batch(specs: List[SourceSpec], mix_by: str) -> bool:
    """True when the loader must mix by batch (see the module docstring)."""
    return mix_by == "batch" or any(get_kind(s.type).text_only or not s.transcripts
                                    or s.repeat for s in specs)


def _speech_sampler(plan: Any, spec: SourceSpec, transform: Any, seed: int,
                    index: Any = None) -> ResumableBucketingSampler:
    lconf = plan.cfg.lhotse
    two_d = loader_constraint_2d(lconf, getattr(transform, "tokenizer", None))
    if two_d is not None and two_d[2] is not None:  # 2D buckets' tps filter (issue 31)
        raise ValueError("lhotse_conf.min_tps / max_tps filter cuts in map-style loading "
                         "that mixes by cut, not with mix_by: batch")
    mux, bins, constraint, formula = speech_batching(
        plan, [spec], [transform], seed, split="train", light=True, two_d=two_d,
        indexes={0: index} if index is not None else None)
    logger.info("source %s: %s, %d buckets", spec.name, formula, len(bins) + 1)
    # the window order (read_window_mb): the buffer held to about one window, as when
    # mixing by cut (the reader tells its window keeper what the sampler holds)
    buffer = window_buffer_size({0: index} if index is not None else {},
                                lconf.read_window_mb, plan.cfg.buffer_size)
    return speech_sampler(plan, mux, bins, constraint, seed, buffer_size=buffer)


def _text_sampler(plan: Any, spec: SourceSpec, tokenizer: Any, seed: int) -> TextBatchSampler:
    cfg, lconf = plan.cfg, plan.cfg.lhotse
    if lconf.max_tokens_in_batch is None:
        raise ValueError(f"source {spec.name} is a text source: set "
                         "lhotse_conf.max_tokens_in_batch (padded tokens per text batch)")
    with plan.reading_once():
        items, stats = read_text_source(spec.paths, tokenizer, name=spec.name or "text",
                                        filter_conf=cfg.dataset_conf.get("filter_conf") or {},
                                        tags=spec.tags, policy=plan.policy)
    sampler = TextBatchSampler(items, max_tokens=lconf.max_tokens_in_batch,
                               num_buckets=lconf.num_buckets, shuffle=cfg.shuffle,
                               world_size=plan.world_size, rank=plan.rank, seed=seed)
    sampler.read_stats = stats  # lines read, kept, filtered (by reason), blank, bad
    return sampler


def mixed_batches(plan: Any, tokenizer: Any) -> BatchMuxSampler:
    """The mixed-by-batch plan of training batches for ``plan`` (a
    :class:`~.build.LoaderPlan`): each speech source gets the map core's sampler
    (:func:`~.map_core.speech_sampler`), each text source a :class:`TextBatchSampler`
    (its lines tokenized by ``tokenizer``),
    and :class:`BatchMuxSampler` draws the source of each batch by weight."""
    if plan.split != "train":
        raise ValueError("text sources, speech-only sources and mix_by: batch are for "
                         "training; give cv sources with speech and transcripts")
    samplers: List[Any] = []
    for i, (spec, tf) in enumerate(zip(plan.specs, plan.transforms)):
        seed = plan.seed + SEED_STRIDE * i
        if get_kind(spec.type).text_only:
            samplers.append(_text_sampler(plan, spec, tokenizer, seed))
            continue
        if not spec.transcripts:  # tag its cuts: the dataset leaves their targets empty
            tf = CutTransform(tf.tokenizer, tf.filter_conf, {**tf.tags, "kind": "speech"})
        samplers.append(_speech_sampler(plan, spec, tf, seed, plan.indexes.get(i)))
    return BatchMuxSampler(samplers, plan.weights, names=[s.name for s in plan.specs],
                           repeat=[s.repeat for s in plan.specs], seed=plan.seed,
                           steps_per_epoch=plan.cfg.lhotse.steps_per_epoch,
                           history=snapshot_depth(plan))


def source_shares(sampler: BatchMuxSampler) -> Dict[str, float]:
    """Each source's share of the batches drawn so far this epoch."""
    total = max(1, sum(sampler.counts))
    return {n: c / total for n, c in zip(sampler.names, sampler.counts)}
