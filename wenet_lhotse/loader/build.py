"""sources -> WeNet filters -> tags -> mux -> bucketing sampler -> DataLoader.

Two ways of loading, chosen per call (``lhotse_conf.mode``, default ``auto``):

* **map** (raw lists, cuts manifests, Shar, indexed shard lists, Parquet, NeMo): the
  sampler runs in the training process over metadata only, one plan of batches from
  :mod:`.map_core` (training:
  :class:`~wenet_lhotse.loader.sampler.ResumableBucketingSampler`); DataLoader
  workers decode audio and compute features for the batches they are given
  (Shar audio is fetched from its tar for those cuts only). Deterministic and
  cheaply resumable.
* **streamed** (WeNet tar shards; ``auto`` picks it when a source is a shard list
  without an index): each DataLoader worker of each rank reads its own tars and runs its own
  sampler (:class:`~wenet_lhotse.loader.bucketing.BucketingSampler`, Lhotse's iterable
  mode); in training, ranks
  stop together through :class:`~wenet_lhotse.loader.distributed.EqualStepsIterator`
  (rest counted as left over) unless ``lhotse_conf.equal_steps: false`` (uneven steps).
  A cv/infer shard list streams the same way, each utterance exactly once.

Either way batches follow WeNet's ``batch_conf`` (a sampling constraint from
:mod:`~wenet_lhotse.loader.constraints`; ``lhotse_conf.batch_by: duration`` for a
duration budget), and each ``iter()`` of the returned loader starts the next epoch
(reshuffling), because WeNet's ``train.py`` never calls ``set_epoch``.

:func:`resolve_mode` decides the mode once; :func:`build_map_loader` and
:func:`build_streamed_loader` build the loader of each
(:class:`~.dataloader.MapDataLoader`, :class:`~.dataloader.StreamedDataLoader`). With
``lhotse_conf.index_first_pass`` a training shard list without an index gets a
:class:`~.first_pass.FirstPassLoader`: streamed for epoch 0 (writing the index), map
from epoch 1.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from wenet_lhotse.dataset.splits import split_rules
from wenet_lhotse.dataset.text_batch import KindDataset
from wenet_lhotse.errors import SkipReport
from wenet_lhotse.features.device import DeviceFeatures
from wenet_lhotse.io.policy import ReadPolicy
from wenet_lhotse.io.pool import EndWithParent
from wenet_lhotse.loader.bins import (
    WorkerEdges,
    bins_and_budget,
    budget_and_formula,
    given_bins,
    needs_sample,
    split_lengths,
)
from wenet_lhotse.loader.config import LoaderConfig
from wenet_lhotse.loader.config_check import check_dataset_conf, check_special_tokens
from wenet_lhotse.loader.constraint2d import (
    check_2d_keys,
    loader_constraint_2d,
    tps_transforms,
)
from wenet_lhotse.loader.constraints import batch_constraint
from wenet_lhotse.loader.dataloader import LhotseDataLoader, MapDataLoader, StreamedDataLoader
from wenet_lhotse.loader.distributed import gloo_group, world_info
from wenet_lhotse.loader.first_pass import FirstPassLoader, first_pass_applies
from wenet_lhotse.loader.in_order import wants_in_order
from wenet_lhotse.loader.ledger import ReadOnce
from wenet_lhotse.loader.map_core import in_list_order, shuffled_buckets, whole_set
from wenet_lhotse.loader.map_items import EpochTaggedSampler, LoaderDataset
from wenet_lhotse.loader.mixed import mixed_batches, mixes_by_batch
from wenet_lhotse.loader.source_readers import audio_attacher, source_metadata
from wenet_lhotse.loader.streamed import INITIAL_FILL, StreamedEpochDataset
from wenet_lhotse.loader.wenet_dataset import CutTransform, make_wenet_dataset
from wenet_lhotse.sources import SourceSpec, mux_sources, parse_sources
from wenet_lhotse.sources.groups import flatten_sources
from wenet_lhotse.sources.indexed_shards import shard_indexes
from wenet_lhotse.sources.registry import get_kind

logger = logging.getLogger(__name__)


def resolve_mode(mode: str, specs: Sequence[SourceSpec], split: str,
                 indexed: Sequence[bool] = ()) -> str:
    """``"map"`` or ``"streamed"`` for ``lhotse_conf.mode`` (``auto``, ``map`` or
    ``streamed``), the sources (``indexed[i]``: source ``i`` is a shard list with a
    valid index) and the split; ValueError for an impossible pair."""
    streamable = all(get_kind(s.type).streamable for s in specs)
    training = split_rules(split).training
    indexed = list(indexed) + [False] * (len(specs) - len(indexed))
    if mode == "auto":
        # Tar shards stream unless indexed (then sampled by offset, like map mode);
        # cv/infer from shards stream too (each worker reads its own tars, so every cut
        # is seen once without holding the set's audio in memory).
        mode = ("streamed" if any(s.streamed_by_default and not ix for s, ix in zip(specs, indexed))
                and (training or streamable) else "map")
    if mode == "streamed" and not training and not streamable:
        mode = "map"  # the train conf's mode also reaches cv: plan a raw/cuts cv set
    if mode == "map" and any(s.fields is not None for s in specs):
        raise ValueError("a Shar source given by URLs ('fields') can only be streamed: "
                         "use lhotse_conf.mode 'auto' or 'streamed'")
    if mode == "streamed" and not streamable:
        raise ValueError("streamed mode reads tar shards / Shar; use mode 'map' for raw lists "
                         "and cuts manifests")
    return mode


@dataclass
class LoaderPlan:
    """What both builders need, resolved once by :func:`build_dataloader`."""

    specs: List[SourceSpec]
    transforms: List[CutTransform]
    cfg: LoaderConfig
    split: str
    seed: int
    world_size: int
    rank: int
    #: how every source is read (``lhotse_conf``'s :meth:`~.lhotse_conf.LhotseConf.read_policy`)
    policy: ReadPolicy
    num_workers: int
    prefetch_factor: Optional[int]
    loader_kw: Dict[str, Any]
    #: source number -> its shard index parts
    #: (:func:`~wenet_lhotse.sources.indexed_shards.open_shard_index`)
    indexes: Dict[int, Any] = field(default_factory=dict)
    #: the skips of metadata read once (re-counted each later epoch; see :mod:`.ledger`)
    read_once: Optional[ReadOnce] = None

    def reading_once(self) -> Any:
        """Context: what is read within is read once and reused every epoch."""
        assert self.read_once is not None
        return self.read_once.reading()

    @property
    def skip_report(self) -> SkipReport:
        """Where every skip of this loader is counted (the policy's; ``loader.skip_report``)."""
        assert self.policy.skip_report is not None
        return self.policy.skip_report

    @property
    def weights(self) -> List[float]:
        return [s.weight for s in self.specs]


def build_map_loader(plan: LoaderPlan, dataset: Any, tokenizer: Any = None) -> MapDataLoader:
    """Map-style loading: one :class:`~.map_items.EpochTaggedSampler` in this process
    over the plan of its batches (:mod:`.map_core`): shuffled buckets (training), WeNet's
    list order, the whole cv/infer set once, or mixing by batch (text sources read with
    ``tokenizer``). A cv/infer loader reads nothing until used: its batches are planned
    at its first ``iter()`` (or ``len()``)."""
    cfg, lconf, split = plan.cfg, plan.cfg.lhotse, plan.split
    attach = audio_attacher(plan.specs, plan.policy, indexed=bool(plan.indexes))
    transforms: Sequence[CutTransform] = ()  # whose filtered counts the ledger reads here
    if mixes_by_batch(plan.specs, lconf.mix_by):  # (issue 22) one sampler per source
        batches: Any = mixed_batches(plan, tokenizer)
        dataset, attach = KindDataset(dataset, attach), None
    else:
        two_d = loader_constraint_2d(lconf, plan.transforms[0].tokenizer)  # (issues 22, 31)
        # the 2D tokens-per-second filter (training only), counted with filter_conf's
        transforms = tps_transforms(plan.transforms, two_d, cfg.rules.training)
        if wants_in_order(cfg.dataset_conf, split, len(plan.specs), cfg.shuffle,
                          cfg.list_shuffle, cfg.batching.by):
            batches = in_list_order(plan)
        elif cfg.rules.training:
            batches = shuffled_buckets(plan, transforms, two_d)
        else:
            batches = whole_set(plan, transforms, two_d)
    return MapDataLoader(LoaderDataset(dataset, attach), sampler=EpochTaggedSampler(batches),
                         skip_report=plan.skip_report, local_transforms=transforms,
                         partitioned=split == "train" or lconf.cv_partition, **plan.loader_kw)


def build_streamed_loader(plan: LoaderPlan, dataset: Any) -> StreamedDataLoader:
    """Streamed loading: each (rank, DataLoader worker) reads and samples its own tars,
    and estimates its own bucket edges from the first cuts it reads (:mod:`.bins`):
    nothing is read here, unless batching by duration needs the mean duration (then at
    the loader's first ``iter()``)."""
    cfg, lconf, split = plan.cfg, plan.cfg.lhotse, plan.split
    specs, seed, ws, rk = plan.specs, plan.seed, plan.world_size, plan.rank
    weights, transforms = plan.weights, plan.transforms
    train = cfg.rules.training
    check_2d_keys(lconf)  # (issue 31)
    if lconf.bucket_bins_2d:  # (issue 22)
        raise ValueError("lhotse_conf.bucket_bins_2d: 2D buckets need map-style loading "
                         "(lhotse_conf.mode: map)")
    lengths = split_lengths(cfg, split, seed)
    need_edges, need_mean = needs_sample(cfg)
    for spec in specs:  # the lists are read in the workers: a wrong path fails here
        spec.check_local_paths()

    def constraint_for(max_duration: Optional[float]) -> Any:
        return batch_constraint(cfg.batching, cfg.dataset_conf, split=split, seed=seed,
                                max_duration=max_duration,
                                quadratic_duration=lconf.quadratic_duration, lengths=lengths)

    def sampled() -> Dict[str, Any]:
        """Budget (and edges) from the mean of the first cuts, read here."""
        sample_cuts = mux_sources([source_metadata(s, plan.policy, tf)
                                   for s, tf in zip(specs, transforms)], weights, seed=seed)
        bins, max_duration, formula = bins_and_budget(
            iter(sample_cuts), cfg, min(lconf.num_cuts_for_bins_estimate, INITIAL_FILL),
            specs, lengths)
        logger.info("%s batches: %s, %d buckets, streamed", split, formula, len(bins) + 1)
        return {"constraint": constraint_for(max_duration), "duration_bins": bins}

    sampler_kw: Dict[str, Any] = {"buffer_size": cfg.buffer_size}
    if not need_mean:
        budget, formula = budget_and_formula(cfg, 0.0)
        constraint = constraint_for(budget)
        sampler_kw["constraint"] = constraint
        bins = given_bins(cfg)
        if need_edges:
            n = min(lconf.num_cuts_for_bins_estimate, INITIAL_FILL)
            sampler_kw["edges"] = WorkerEdges(cfg, n, lengths)  # the constraint's (one cache)
            logger.info("%s batches: %s, %d buckets estimated by each worker from its first "
                        "%d cuts, streamed", split, formula, lconf.num_buckets, n)
        else:
            sampler_kw["duration_bins"] = bins
            logger.info("%s batches: %s, %d buckets, streamed", split, formula, len(bins) + 1)
    # cv/infer: every rank reads the whole set unless cv_partition; no step syncing
    # (evaluation has no per-step collective; combine losses with reduce_cv_loss).
    partition = train or lconf.cv_partition
    ds = StreamedEpochDataset(dataset, specs, transforms, sampler_kw, seed=seed,
                              shuffle=cfg.shuffle, stop_early=lconf.mux_stop_early,
                              rank=rk if partition else 0, world_size=ws if partition else 1,
                              policy=plan.policy, cycle=cfg.cycle)
    if need_mean:
        ds.defer(sampled)
    equal = train and lconf.equal_steps
    group = gloo_group() if ws > 1 and equal else None
    if ws > 1 and equal and group is None:
        logger.warning("world_size %d but torch.distributed is not initialized: ranks cannot "
                       "agree on the step count of streamed data", ws)
    return StreamedDataLoader(ds, equal_steps_group=group,
                              max_steps=lconf.steps_per_epoch if train else None,
                              skip_report=plan.skip_report, **plan.loader_kw)


def build_dataloader(
    sources: Any,
    tokenizer: Any = None,
    dataset_conf: Optional[Mapping[str, Any]] = None,
    split: str = "train",
    *,
    dataset: Any = None,
    num_workers: int = 0,
    seed: int = 0,
    world_size: Optional[int] = None,
    rank: Optional[int] = None,
    pin_memory: bool = False,
    prefetch_factor: Optional[int] = None,
    persistent_workers: bool = True,
    skip_report: Optional[SkipReport] = None,
    special_tokens: Optional[Mapping[str, int]] = None,
) -> Tuple[Any, LhotseDataLoader]:
    """Build ``(dataset, loader)`` for one split.

    :param sources: a path, a :class:`SourceSpec` / yaml dict, or a list of them.
    :param tokenizer: WeNet-style tokenizer (``tokenize(line) -> (tokens, ids)``); used for
        ``filter_conf`` token limits and targets. ``None`` only for ``split="infer"``.
    :param dataset_conf: WeNet's ``dataset_conf`` (with optional ``lhotse_conf``).
    :param split: ``train`` (shuffled, augmented), ``cv`` (partitioned across ranks, no
        duplicates, unshuffled), ``infer`` (as cv, no filters, no text needed).
    :param dataset: ``dataset[cuts] -> batch``; default: our ``WenetAsrDataset`` configured
        from ``dataset_conf``.
    :param num_workers: DataLoader worker processes.
    :param seed: integer seed; the same seed gives the same batches on every run and rank.
    :param world_size: ranks; default from ``torch.distributed`` / ``WORLD_SIZE``.
    :param rank: this rank; default from ``torch.distributed`` / ``RANK``.
    :param skip_report: where items skipped with ``lhotse_conf.fault_tolerant`` are
        counted (default: a new one); also ``loader.skip_report``.
    :param special_tokens: the yaml's ``tokenizer_conf.special_tokens``; when given, the
        tokenizer's symbol table is checked against it.
    :return: the map-style dataset (``dataset[cuts]``) and the loader.
    :raises WenetConfigError: at start-up, for an unknown key or a bad value in
        ``dataset_conf`` or a symbol table that disagrees with ``special_tokens``.

    >>> import tempfile
    >>> from wenet_lhotse.corpus import generate_corpus
    >>> from wenet_lhotse.text import CharTokenizer
    >>> corpus = generate_corpus(tempfile.mkdtemp(), num_utterances=4, max_duration=1.5)
    >>> conf = {"batch_conf": {"batch_type": "static", "batch_size": 2}}
    >>> dataset, loader = build_dataloader(str(corpus.data_list), CharTokenizer(corpus.units),
    ...                                    conf, "cv")
    >>> [tuple(batch["feats"].shape[::2]) for batch in loader]  # (utterances, 23 bins)
    [(2, 23), (2, 23)]
    """
    split_rules(split)  # ValueError for an unknown split
    # One report for every skip of this loader: readers here and in workers, features,
    # dataset (fault-tolerant mode); exposed as loader.skip_report.
    skip_report = skip_report if skip_report is not None else SkipReport()
    if not isinstance(seed, int):
        raise ValueError("seed must be an int: every rank must draw the same batches")
    check_dataset_conf(dataset_conf)  # a typo stops here, naming the key (WeNet ignores it)
    table = (getattr(tokenizer, "symbol_table_path", None)
             or getattr(tokenizer, "symbol_table", None))
    if special_tokens is not None and table is not None:
        check_special_tokens(table, special_tokens)
    cfg = LoaderConfig.from_wenet(dataset_conf, split)
    lconf = cfg.lhotse
    # (issue 22) nested source groups and temperature -> flat sources with their weights
    specs = parse_sources(flatten_sources(sources, lconf.reweight_temperature))
    ws, rk = world_info(world_size, rank)
    policy = lconf.read_policy(skip_report)
    if dataset is None:
        dataset = make_wenet_dataset(tokenizer, cfg.dataset_conf, split, seed=seed)
    transform = DeviceFeatures.for_dataset(dataset, lconf.features_on, lconf.device)
    # WeNet's filter_conf where the split filters (not infer) and a tokenizer counts tokens
    filters = cfg.filter_conf if tokenizer is not None else None
    transforms = [CutTransform(tokenizer if filters is not None else None, filters, s.tags)
                  for s in specs]

    read_once = ReadOnce(skip_report)
    loader_kw: Dict[str, Any] = {"num_workers": num_workers, "pin_memory": pin_memory,
                                 "batch_transform": transform, "split": split,
                                 "world": (ws, rk), "read_once": read_once}
    if num_workers > 0:
        loader_kw["persistent_workers"] = persistent_workers
        if prefetch_factor is not None:
            loader_kw["prefetch_factor"] = prefetch_factor
        from lhotse.dataset.dataloading import make_worker_init_fn

        # (issue 30) a worker ends within 0.5 s of its parent's death, not torch's 5 s
        loader_kw["worker_init_fn"] = EndWithParent(
            make_worker_init_fn(rank=rk, world_size=ws, seed=seed))
    with read_once.reading():  # start-up checks: a tar left out is left out every epoch
        indexes = (shard_indexes(specs, lconf, split=split, policy=policy)
                   if lconf.mode != "streamed" else {})
    plan = LoaderPlan(specs, transforms, cfg, split, seed, ws, rk, policy,
                      num_workers, prefetch_factor, loader_kw, indexes, read_once)
    # (issue 22) text / speech-only sources or mix_by: batch -> one sampler per source
    if mixes_by_batch(specs, lconf.mix_by):
        return dataset, _progress(build_map_loader(plan, dataset, tokenizer), lconf)
    mode = resolve_mode(lconf.mode, specs, split, [i in indexes for i in range(len(specs))])
    if lconf.index_first_pass and cfg.rules.training and first_pass_applies(specs):
        loader = FirstPassLoader(plan, dataset, build_streamed_loader, build_map_loader,
                                 indexed=mode == "map")
        return dataset, _progress(loader, lconf)
    if mode != "map":
        plan.indexes = {}
    build = build_map_loader if mode == "map" else build_streamed_loader
    return dataset, _progress(build(plan, dataset), lconf)


def _progress(loader: Any, lconf: Any) -> Any:
    """``loader`` with ``lhotse_conf.progress_every`` (see :mod:`~.progress`)."""
    loader.progress_every = lconf.progress_every
    return loader
