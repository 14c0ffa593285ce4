"""Training input: sources -> filters -> mux -> bucketing sampler -> DataLoader, with
DDP-safe step counts, cheap resume, and WeNet's ``init_dataset_and_dataloader`` drop-in
(:mod:`wenet_lhotse.dropin.compat`)."""

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
from wenet_lhotse.loader.readers import JsonlReader, ListReader, shar_reader
from wenet_lhotse.loader.sampler import ResumableBucketingSampler
from wenet_lhotse.loader.shar_audio import SharAudioAttacher
from wenet_lhotse.loader.streamed import StreamedEpochDataset
from wenet_lhotse.loader.wenet_dataset import make_wenet_dataset

__all__ = [
    "BatchingConfig",
    "BucketBatchConstraint",
    "BucketingSampler",
    "DataWaitMeter",
    "EpochLedger",
    "EqualStepsIterator",
    "JsonlReader",
    "LhotseConf",
    "LhotseDataLoader",
    "ListReader",
    "LoaderConfig",
    "MapDataLoader",
    "MaxFramesConstraint",
    "PositionedStream",
    "ResumableBucketingSampler",
    "ResumableMux",
    "SharAudioAttacher",
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
    "shar_reader",
    "wenet_constraint",
    "world_info",
]
