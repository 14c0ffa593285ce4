"""Training input: sources -> filters -> mux -> bucketing sampler -> DataLoader, with
DDP-safe step counts and cheap resume. The positioned readers it samples from are in
:mod:`wenet_lhotse.sources` (:mod:`~wenet_lhotse.sources.positioned`); WeNet's
``init_dataset_and_dataloader`` drop-in built on it is :mod:`wenet_lhotse.dropin`."""

from wenet_lhotse.loader.bucketing import BucketingSampler, SteppedBucketer
from wenet_lhotse.loader.build import build_dataloader, resolve_mode
from wenet_lhotse.loader.config import BatchingConfig, LoaderConfig
from wenet_lhotse.loader.constraints import (
    BucketBatchConstraint,
    MaxFramesConstraint,
    StaticBatchConstraint,
    wenet_constraint,
)
from wenet_lhotse.loader.dataloader import LhotseDataLoader, MapDataLoader, StreamedDataLoader
from wenet_lhotse.loader.distributed import (
    DataWaitMeter,
    EqualStepsIterator,
    plan_last_two_rounds,
    plan_partition,
    reduce_cv_loss,
    world_info,
)
from wenet_lhotse.loader.ledger import EpochLedger
from wenet_lhotse.loader.lhotse_conf import LhotseConf
from wenet_lhotse.loader.mux import PositionedStream, ResumableMux
from wenet_lhotse.loader.sampler import ResumableBucketingSampler
from wenet_lhotse.loader.streamed import StreamedEpochDataset
from wenet_lhotse.loader.wenet_dataset import make_wenet_dataset

__all__ = [
    "BatchingConfig",
    "BucketBatchConstraint",
    "BucketingSampler",
    "DataWaitMeter",
    "EpochLedger",
    "EqualStepsIterator",
    "LhotseConf",
    "LhotseDataLoader",
    "LoaderConfig",
    "MapDataLoader",
    "MaxFramesConstraint",
    "PositionedStream",
    "ResumableBucketingSampler",
    "ResumableMux",
    "StaticBatchConstraint",
    "SteppedBucketer",
    "StreamedDataLoader",
    "StreamedEpochDataset",
    "build_dataloader",
    "make_wenet_dataset",
    "plan_last_two_rounds",
    "plan_partition",
    "reduce_cv_loss",
    "resolve_mode",
    "wenet_constraint",
    "world_info",
]
