"""sources -> WeNet filters -> tags -> mux -> bucketing sampler -> DataLoader.

Two ways of loading, chosen per call (``lhotse_conf.mode``, default ``auto``):

* **map** (raw lists, cuts manifests, Shar): the sampler runs in the training
  process over metadata only (Lhotse's rank-aware ``DynamicBucketingSampler``,
  :class:`~wenet_lhotse.loader.resume.ResumableBucketingSampler`); DataLoader
  workers decode audio and compute features for the batches they are given
  (Shar audio is fetched from its tar for those cuts only). Deterministic and
  cheaply resumable.
* **streamed** (WeNet tar shards; ``auto`` picks it when any source is a shard
  list): each DataLoader worker of each rank reads its own tars and runs its own
  sampler (``world_size=1, rank=0``, Lhotse's iterable mode); in training, ranks
  stop together through :class:`~wenet_lhotse.loader.distributed.EqualStepsIterator`.
  A cv/infer shard list streams the same way, each utterance exactly once.

Either way each ``iter()`` of the returned loader starts the next epoch
(reshuffling), because WeNet's ``train.py`` never calls ``set_epoch``.
"""

from __future__ import annotations

import logging
import random
import warnings
from itertools import islice
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import torch
from lhotse import CutSet
from lhotse.cut import Cut
from lhotse.dataset.sampling.dynamic_bucketing import (
    DynamicBucketingSampler,
    estimate_duration_buckets,
)

from wenet_lhotse.errors import BATCH_SKIPS_KEY, SkipReport
from wenet_lhotse.formats.split import reader_share
from wenet_lhotse.loader.config import LoaderConfig
from wenet_lhotse.loader.distributed import (
    EqualStepsIterator,
    gloo_group,
    plan_partition,
    world_info,
)
from wenet_lhotse.loader.resume import (
    JsonlReader,
    ListReader,
    PositionedStream,
    ResumableBucketingSampler,
    ResumableMux,
    SharAudioAttacher,
    shar_reader,
)
from wenet_lhotse.sources import (
    SourceSpec,
    TagCuts,
    mux_sources,
    open_source,
    parse_sources,
    spec_shar_fields,
)

logger = logging.getLogger(__name__)

SPLITS = ("train", "cv", "infer")


# ---------------------------------------------------------------------------- pieces


class CutTransform:
    """Picklable ``CutSet -> CutSet``: WeNet's ``filter_conf`` (when a tokenizer is
    given and the split is not ``infer``), then the source's tags."""

    def __init__(self, tokenizer: Any = None, filter_conf: Optional[Mapping] = None,
                 tags: Optional[Mapping[str, Any]] = None) -> None:
        self.tokenizer = tokenizer
        self.filter_conf = dict(filter_conf) if filter_conf is not None else None
        self.tags = dict(tags or {})

    def __call__(self, cuts: CutSet) -> CutSet:
        if self.filter_conf is not None:
            from wenet_lhotse.dataset.filters import wenet_filter

            cuts = wenet_filter(cuts, self.tokenizer, self.filter_conf)
        if self.tags:
            cuts = cuts.map(TagCuts(self.tags))
        return cuts


class LoaderDataset(torch.utils.data.Dataset):
    """What the DataLoader workers run for map-style loading: takes ``(epoch, cuts)``
    from :class:`EpochTaggedSampler` (or plain ``cuts``), forwards a new epoch to
    ``dataset.set_epoch`` (persistent workers never see the main process's epoch
    otherwise; augmentation seeds depend on it), runs ``attach(cuts)`` (Shar audio
    for these cuts only), then ``dataset[cuts]``."""

    def __init__(self, dataset: Any, attach: Any = None) -> None:
        self.dataset = dataset
        self.attach = attach
        self._epoch: Optional[int] = None

    def __getitem__(self, item: Any) -> Any:
        if isinstance(item, tuple):
            epoch, cuts = item
            if epoch != self._epoch and hasattr(self.dataset, "set_epoch"):
                self.dataset.set_epoch(epoch)
            self._epoch = epoch
        else:
            cuts = item
        if self.attach is not None:
            cuts = self.attach(cuts)
        return self.dataset[cuts]


class EpochTaggedSampler(torch.utils.data.Sampler):
    """Yields ``(epoch, batch)`` from a :class:`ResumableBucketingSampler`."""

    def __init__(self, sampler: ResumableBucketingSampler) -> None:
        self.sampler = sampler

    def __iter__(self) -> Iterator[Tuple[int, CutSet]]:
        # Start the epoch now (not at the first next()), so that a state_dict() taken
        # right after iter(loader) already refers to the new epoch.
        return self._tagged(iter(self.sampler))

    def _tagged(self, it: Iterator[CutSet]) -> Iterator[Tuple[int, CutSet]]:
        while True:  # not ``for``: iter(it) would start yet another epoch
            try:
                batch = next(it)
            except StopIteration:
                return
            yield self.sampler.epoch, batch


class PlannedSampler(torch.utils.data.Sampler):
    """Yields a fixed list of CutSet batches (the cv plan for this rank) on every ``iter()``."""

    def __init__(self, batches: Sequence[CutSet]) -> None:
        self.batches = list(batches)

    def __iter__(self) -> Iterator[CutSet]:
        return iter(self.batches)

    def __len__(self) -> int:
        return len(self.batches)


class StreamedEpochDataset(torch.utils.data.IterableDataset):
    """Lhotse's iterable mode, one epoch per ``iter()``: opens the sources with this
    (rank, worker)'s share of the tars shuffled for the epoch, runs a
    ``DynamicBucketingSampler(world_size=1, rank=0)`` over them and yields
    ``dataset[batch]``. The epoch counter lives in each worker's copy and advances on
    every ``iter()`` (persistent workers each get exactly one ``iter()`` per epoch)."""

    def __init__(self, dataset: Any, specs: Sequence[SourceSpec], transforms: Sequence[Any],
                 sampler_kw: Dict[str, Any], seed: int, shuffle: bool, stop_early: bool,
                 rank: int, world_size: int, strict: bool = True) -> None:
        super().__init__()
        self.dataset = dataset
        self.specs = list(specs)
        self.transforms = list(transforms)
        self.sampler_kw = dict(sampler_kw)
        self.seed = seed
        self.shuffle = shuffle
        self.stop_early = stop_early
        self.rank, self.world_size = rank, world_size
        self.strict = strict
        self.skip_report = SkipReport()  # this worker's reader skips, forwarded per batch
        self.epoch = -1
        self._next_epoch: Optional[int] = None
        # (epoch, {worker id: batches it already delivered in that epoch},
        #  the worker the restored epoch continues with)
        self._skip: Tuple[int, Dict[int, int], int] = (-1, {}, 0)

    def set_epoch(self, epoch: int) -> None:
        self._next_epoch = epoch

    def cuts_for_epoch(self, epoch: int, worker: int = 0, num_workers: int = 1) -> CutSet:
        """This rank's and (logical) worker's share of the tars of every source."""
        cutsets = []
        for spec, tf in zip(self.specs, self.transforms):
            kw: Dict[str, Any] = {}
            if spec.type == "shard":
                kw = {"rank": self.rank, "world_size": self.world_size, "worker_id": worker,
                      "num_workers": num_workers}
            else:  # Shar: the same split, done here so that the worker id is ours
                order = list(range(len(spec_shar_fields(spec)["cuts"])))
                if self.shuffle:
                    random.Random(self.seed + epoch).shuffle(order)
                kw = {"shar_shards": reader_share(order, self.rank, self.world_size, worker,
                                                  num_workers)}
            cutsets.append(open_source(spec, strict=self.strict, shuffle_shards=self.shuffle,
                                       seed=self.seed, epoch=epoch, split_for_dataloading=True,
                                       transform=tf, skip_report=self.skip_report, **kw))
        return mux_sources(cutsets, [s.weight for s in self.specs], seed=self.seed + epoch,
                           stop_early=self.stop_early)

    def __iter__(self) -> Iterator[Any]:
        if self._next_epoch is not None:
            self.epoch, self._next_epoch = self._next_epoch, None
        else:
            self.epoch += 1
        if hasattr(self.dataset, "set_epoch"):
            self.dataset.set_epoch(self.epoch)
        info = torch.utils.data.get_worker_info()
        wid, nw = (info.id, info.num_workers) if info is not None else (0, 1)
        skip_epoch, per_worker, offset = self._skip
        if skip_epoch != self.epoch:
            per_worker, offset = {}, 0
        sampler = DynamicBucketingSampler(self.cuts_for_epoch(self.epoch, wid, nw),
                                          world_size=1, rank=0, seed=self.seed,
                                          shuffle=self.shuffle, **self.sampler_kw)
        sampler.set_epoch(self.epoch)
        skip = per_worker.get(wid, 0)
        if wid < offset:
            # The DataLoader asks its workers round-robin from worker 0; a restored epoch
            # must go on with worker `offset` (the one after the last consumed batch's).
            # Workers before it hand in a placeholder the loader drops.
            yield None
        for i, batch in enumerate(sampler):
            if i < skip:
                continue  # sampled from metadata; no audio decoded, no features computed
            out = self.dataset[batch]
            skipped = self.skip_report.take_new()
            if skipped and isinstance(out, dict):
                out.setdefault(BATCH_SKIPS_KEY, []).extend(skipped)
            # The worker id travels with the batch: LhotseDataLoader counts batches per
            # worker, which makes resume exact even after some workers ran out of tars.
            yield wid, out


class LhotseDataLoader(torch.utils.data.DataLoader):
    """A ``DataLoader`` (``batch_size=None``) that counts the batches the training loop
    consumed, so that :meth:`state_dict` describes exactly what comes next, and (for
    streamed data under DDP) stops all ranks at the same step."""

    def __init__(self, dataset: Any, *, mode: str, equal_steps_group: Any = None,
                 max_steps: Optional[int] = None, skip_report: Optional[SkipReport] = None,
                 **kw: Any) -> None:
        super().__init__(dataset, batch_size=None, **kw)
        self.mode = mode
        #: every item skipped in fault-tolerant mode, wherever it was skipped (readers in
        #: this process, and readers, features and dataset in DataLoader workers)
        self.skip_report = skip_report if skip_report is not None else SkipReport()
        self.equal_steps_group = equal_steps_group
        self.max_steps = max_steps
        self.consumed = 0
        self.per_worker: Dict[int, int] = {}  # streamed: batches consumed per worker id
        self.last_worker = -1  # streamed: the worker of the last consumed batch
        self.epoch = -1
        self._finished = False  # the current epoch's iterator is exhausted
        self._restored: Optional[Dict[str, Any]] = None

    def __iter__(self) -> Iterator[Any]:
        inner = super().__iter__()
        self._finished = False
        if self._restored is not None:
            self.consumed = self._restored["consumed"]
            self.per_worker = dict(self._restored.get("per_worker", {}))
            self.last_worker = self._restored.get("last_worker", -1)
            self.epoch = self._restored["epoch"]
            self._restored = None
        else:
            self.consumed = 0
            self.per_worker, self.last_worker = {}, -1
            self.epoch += 1
        if self.bucketing_sampler is not None:
            self.epoch = self.bucketing_sampler.epoch
        it: Iterator[Any] = inner
        if self.mode == "streamed":  # drop the round-robin placeholders of a restored epoch
            it = (item for item in it if item is not None)
        if self.mode == "streamed" and (self.equal_steps_group is not None
                                        or self.max_steps is not None):
            it = EqualStepsIterator(inner, self.equal_steps_group, self.max_steps)
        return self._count(it)

    @property
    def bucketing_sampler(self) -> Optional[ResumableBucketingSampler]:
        """The map-style train sampler (``None`` for cv plans and streamed loading)."""
        s = self.sampler
        s = getattr(s, "sampler", s)
        return s if isinstance(s, ResumableBucketingSampler) else None

    def _count(self, it: Iterator[Any]) -> Iterator[Any]:
        for batch in it:
            self.consumed += 1
            if self.mode == "streamed":  # StreamedEpochDataset yields (worker id, batch)
                wid, batch = batch
                self.per_worker[wid] = self.per_worker.get(wid, 0) + 1
                self.last_worker = wid
            if isinstance(batch, dict) and BATCH_SKIPS_KEY in batch:
                self.skip_report.extend(batch.pop(BATCH_SKIPS_KEY))  # logged where skipped
            yield batch
        self._finished = True

    def state_dict(self) -> Dict[str, Any]:
        """Where the training loop is: enough to continue with exactly the next batch
        (map mode) or with the next batch after replaying metadata (streamed mode)."""
        if self.bucketing_sampler is not None:
            return {"mode": "map", "sampler": self.bucketing_sampler.state_dict(self.consumed)}
        if self._finished:  # the epoch is over: resume at the start of the next one
            return {"mode": self.mode, "epoch": self.epoch + 1, "consumed": 0, "per_worker": {},
                    "num_workers": self.num_workers}
        return {"mode": self.mode, "epoch": max(self.epoch, 0), "consumed": self.consumed,
                "per_worker": {str(k): v for k, v in self.per_worker.items()},
                "last_worker": self.last_worker, "num_workers": self.num_workers}

    def load_state_dict(self, sd: Mapping[str, Any]) -> None:
        """Restore from :meth:`state_dict`; call before the first ``iter()``."""
        if sd.get("mode") == "map":
            if self.bucketing_sampler is None:
                raise ValueError("state was saved by a map-style train loader; this one is not")
            sampler = self.bucketing_sampler
            sampler.load_state_dict(sd["sampler"])
            self.consumed = int(sd["sampler"]["consumed"])
            self._finished = False
            self._restored = {"epoch": sampler.epoch, "consumed": self.consumed}
            return
        ds = self.dataset
        if not isinstance(ds, StreamedEpochDataset):
            raise ValueError("state was saved by a streamed loader; this one is not")
        ds.set_epoch(int(sd["epoch"]))
        if sd.get("num_workers", self.num_workers) != self.num_workers:
            # Each worker's tars depend on the worker count: positions would not match.
            raise ValueError(f"state saved with num_workers={sd['num_workers']}; this loader "
                             f"has {self.num_workers}: streamed resume needs the same count")
        per_worker = {int(k): int(v) for k, v in (sd.get("per_worker") or {}).items()}
        last = int(sd.get("last_worker", -1))
        offset = (last + 1) % max(self.num_workers, 1) if last >= 0 else 0
        ds._skip = (int(sd["epoch"]), per_worker, offset)
        self.epoch, self.consumed, self._finished = int(sd["epoch"]), int(sd["consumed"]), False
        # a state_dict() taken before iterating gives the same state back
        self.per_worker, self.last_worker = dict(per_worker), last
        self._restored = {"epoch": self.epoch, "consumed": self.consumed,
                          "per_worker": per_worker, "last_worker": last}


# ---------------------------------------------------------------------------- build


def make_wenet_dataset(tokenizer: Any, dataset_conf: Mapping[str, Any], split: str, *,
                       pool_workers: int = 0, seed: int = 0, fault_tolerant: bool = False,
                       return_pcm: bool = False) -> Any:
    """Our ``WenetAsrDataset`` with features configured from WeNet's ``dataset_conf``
    (fbank/mfcc/log-mel, speed perturb, resample, spec_aug/sub/trim)."""
    from wenet_lhotse.dataset import WenetAsrDataset
    from wenet_lhotse.features.fbank import extractor_from_wenet_conf
    from wenet_lhotse.features.pool import PooledFeatures

    conf = dict(dataset_conf)
    train = split == "train"

    def aug(name: str, default: bool = False) -> Any:
        # WeNet: a boolean switch plus an optional *_conf dict of the function's arguments.
        on = conf.get(name, default)
        return (conf.get(f"{name}_conf") or True) if train and on else None

    features = PooledFeatures(
        extractor_from_wenet_conf(conf), num_workers=pool_workers,
        speed_perturb=bool(conf.get("speed_perturb", False)) and train,
        # WeNet's defaults: resample to 16 kHz and spec_aug on unless the yaml says otherwise
        resample_to=(conf.get("resample_conf") or {}).get("resample_rate", 16000),
        spec_aug=aug("spec_aug", default=True), spec_sub=aug("spec_sub"),
        spec_trim=aug("spec_trim"),
        seed=seed, fault_tolerant=fault_tolerant, return_audio=return_pcm)
    speaker_conf = conf.get("speaker_conf") or {}
    return WenetAsrDataset(tokenizer, features, split=split, return_pcm=return_pcm,
                           fault_tolerant=fault_tolerant,
                           speaker_table=speaker_conf.get("speaker_table_path"))


def _map_reader(spec: SourceSpec, shuffle: bool, seed: int, strict: bool,
                skip_report: Optional[SkipReport], probe_cache: Any = False):
    if spec.type == "cuts":
        return JsonlReader(spec.paths, shuffle_files=shuffle, seed=seed)
    if spec.type == "shar":
        return shar_reader(spec.paths[0], shuffle_files=shuffle, seed=seed)
    # raw lists (durations from audio headers, probed once) and, for cv, shard lists:
    # held in memory, fully reshuffled each epoch.
    if spec.type == "raw" and probe_cache:
        from wenet_lhotse.sources.probe_cache import probed_raw_list

        probed = probed_raw_list(spec.paths, strict=strict, skip_report=skip_report,
                                 cache_dir=None if probe_cache is True else probe_cache)
        cuts = list(CutSet.from_jsonl_lazy(probed.manifest))
        return ListReader(cuts, shuffle=shuffle, seed=seed)
    cuts = list(open_source(spec, strict=strict, skip_report=skip_report))
    if spec.type == "shard":
        logger.warning("source %s: WeNet shards loaded into memory for map-style loading "
                       "(%d cuts)", spec.name, len(cuts))
    return ListReader(cuts, shuffle=shuffle, seed=seed)


def estimate_bins(cuts: Sequence[Cut], num_buckets: int) -> List[float]:
    """Bucket edges (seconds) from cut durations (metadata); fewer buckets for tiny sets."""
    n = min(num_buckets, len(cuts) // 2)
    if n < 2:
        return []
    return [float(b) for b in estimate_duration_buckets(cuts, num_buckets=n)]


def _metadata(spec: SourceSpec, strict: bool, transform: Any) -> CutSet:
    """The source's cuts for estimating bins: Shar from its cuts jsonl only (no audio);
    other types as opened (shard lists read their first tars)."""
    if spec.type == "shar" and spec.fields is not None:  # remote: the cuts field only
        return transform(CutSet.from_shar(fields={"cuts": spec.fields["cuts"]}))
    if spec.type == "shar":
        return transform(CutSet(shar_reader(spec.paths[0]).as_lazy_cuts()))
    return open_source(spec, strict=strict, transform=transform)


def _bins_and_budget(cuts: Iterator[Cut], cfg: LoaderConfig, n: int,
                     specs: Sequence[SourceSpec]) -> Tuple[List[float], float]:
    """Bucket edges and the duration budget (seconds), from the metadata of the first
    ``n`` cuts -- only read when needed (no ``duration_bins`` given, or a static
    ``batch_size`` to turn into seconds)."""
    lconf = cfg.lhotse
    need = lconf.duration_bins is None or cfg.batching.max_duration is None
    sample = list(islice(cuts, n if need else 1))
    if not sample:
        raise ValueError(f"no cuts in {[s.name for s in specs]} (after filter_conf)")
    mean = sum(c.duration for c in sample) / len(sample)
    budget = cfg.batching.resolve(mean)
    if lconf.duration_bins is not None:
        bins = [float(b) for b in lconf.duration_bins]
    else:
        # A small data set gets fewer buckets: each should hold at least a full batch.
        per_batch = max(1.0, budget / mean)
        bins = estimate_bins(sample, min(lconf.num_buckets, int(len(sample) / per_batch)))
        logger.info("duration_bins (pass them as lhotse_conf.duration_bins to skip this "
                    "estimate): %s", [round(b, 3) for b in bins])
    return bins, budget


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
    :return: the map-style dataset (``dataset[cuts]``) and the loader.
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    # One report for every skip of this loader: readers here and in workers, features,
    # dataset (fault-tolerant mode); exposed as loader.skip_report.
    skip_report = skip_report if skip_report is not None else SkipReport()
    if not isinstance(seed, int):
        raise ValueError("seed must be an int: every rank must draw the same batches")
    cfg = LoaderConfig.from_wenet(dataset_conf, split)
    lconf = cfg.lhotse
    specs = parse_sources(sources)
    ws, rk = world_info(world_size, rank)
    strict = not lconf.fault_tolerant
    if dataset is None:
        dataset = make_wenet_dataset(tokenizer, cfg.dataset_conf, split,
                                     pool_workers=lconf.pool_workers, seed=seed,
                                     fault_tolerant=lconf.fault_tolerant,
                                     return_pcm=lconf.return_pcm)
    filter_conf = cfg.dataset_conf.get("filter_conf") or {}
    use_filter = tokenizer is not None and split != "infer"
    transforms = [CutTransform(tokenizer if use_filter else None,
                               filter_conf if use_filter else None, s.tags) for s in specs]
    weights = [s.weight for s in specs]

    mode = lconf.mode
    streamable = all(s.type in ("shard", "shar") for s in specs)
    if mode == "auto":
        # Tar shards stream; cv/infer from shards stream too (each worker reads its own
        # tars, so every cut is seen once without holding the set's audio in memory).
        mode = ("streamed" if any(s.streamed for s in specs)
                and (split == "train" or streamable) else "map")
    if mode == "streamed" and split != "train" and not streamable:
        mode = "map"  # the train conf's mode also reaches cv: plan a raw/cuts cv set
    if mode == "map" and any(s.fields is not None for s in specs):
        raise ValueError("a Shar source given by URLs ('fields') can only be streamed: "
                         "use lhotse_conf.mode 'auto' or 'streamed'")
    if mode == "streamed" and not streamable:
        raise ValueError("streamed mode reads tar shards / Shar; use mode 'map' for raw lists "
                         "and cuts manifests")

    loader_kw: Dict[str, Any] = {"num_workers": num_workers, "pin_memory": pin_memory}
    if num_workers > 0:
        loader_kw["persistent_workers"] = persistent_workers
        if prefetch_factor is not None:
            loader_kw["prefetch_factor"] = prefetch_factor
        from lhotse.dataset.dataloading import make_worker_init_fn

        loader_kw["worker_init_fn"] = make_worker_init_fn(rank=rk, world_size=ws, seed=seed)

    if mode == "map":
        streams = [PositionedStream(_map_reader(s, cfg.shuffle, seed, strict, skip_report,
                                                lconf.probe_cache), tf)
                   for s, tf in zip(specs, transforms)]
        mux = ResumableMux(streams, weights, seed=seed, stop_early=lconf.mux_stop_early)
        mux.start(0)
        bins, max_duration = _bins_and_budget(mux, cfg, lconf.num_cuts_for_bins_estimate, specs)
        logger.info("%s batches: max_duration %.1f s (%s), %d buckets, %s", split, max_duration,
                    cfg.batching.formula or "given", len(bins) + 1, mode)
        attach = SharAudioAttacher() if any(s.type == "shar" for s in specs) else None
        dataset_for_loader = LoaderDataset(dataset, attach)
        if split == "train":
            depth = max(lconf.snapshot_depth,
                        num_workers * (prefetch_factor or 2) + 4 if num_workers else 4)
            sampler = ResumableBucketingSampler(
                mux, duration_bins=bins, max_duration=max_duration,
                max_cuts=cfg.batching.max_cuts, shuffle=cfg.shuffle, drop_last=False,
                buffer_size=cfg.buffer_size, quadratic_duration=lconf.quadratic_duration,
                world_size=ws, rank=rk, seed=seed, snapshot_depth=depth)
            loader_sampler: Any = EpochTaggedSampler(sampler)
        else:
            mux.start(0)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # an eager CutSet is fine for a one-off plan
                plan = list(DynamicBucketingSampler(
                    CutSet.from_cuts(list(mux)), max_duration=max_duration,
                    max_cuts=cfg.batching.max_cuts, duration_bins=bins, shuffle=False,
                    drop_last=False, world_size=1, rank=0, buffer_size=cfg.buffer_size,
                    quadratic_duration=lconf.quadratic_duration))
            if lconf.cv_partition:
                plan = plan_partition(plan, ws)[rk::ws]
            loader_sampler = PlannedSampler(plan)
        loader = LhotseDataLoader(dataset_for_loader, mode="map", sampler=loader_sampler,
                                  skip_report=skip_report, **loader_kw)
        return dataset, loader

    # streamed
    sample_cuts = mux_sources([_metadata(s, strict, tf) for s, tf in zip(specs, transforms)],
                              weights, seed=seed)
    bins, max_duration = _bins_and_budget(iter(sample_cuts), cfg,
                                          min(lconf.num_cuts_for_bins_estimate, 2000), specs)
    del sample_cuts
    sampler_kw = {"max_duration": max_duration, "max_cuts": cfg.batching.max_cuts,
                  "duration_bins": bins, "buffer_size": cfg.buffer_size,
                  "quadratic_duration": lconf.quadratic_duration, "drop_last": False}
    # cv/infer: every rank reads the whole set unless cv_partition; no step syncing
    # (evaluation has no per-step collective; combine losses with reduce_cv_loss).
    train = split == "train"
    partition = train or lconf.cv_partition
    ds = StreamedEpochDataset(dataset, specs, transforms, sampler_kw, seed=seed,
                              shuffle=cfg.shuffle, stop_early=lconf.mux_stop_early,
                              rank=rk if partition else 0, world_size=ws if partition else 1,
                              strict=strict)
    group = gloo_group() if ws > 1 and train else None
    if ws > 1 and train and group is None:
        logger.warning("world_size %d but torch.distributed is not initialized: ranks cannot "
                       "agree on the step count of streamed data", ws)
    loader = LhotseDataLoader(ds, mode="streamed", equal_steps_group=group,
                              max_steps=lconf.steps_per_epoch if train else None,
                              skip_report=skip_report, **loader_kw)
    return dataset, loader
