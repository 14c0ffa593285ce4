"""Training input: sources -> filters -> mux -> bucketing sampler -> DataLoader, with
DDP-safe step counts, cheap resume, and WeNet's ``init_dataset_and_dataloader`` drop-in
(:mod:`wenet_lhotse.wenet_compat`)."""

from wenet_lhotse.loader.bucketing import BucketingSampler, SteppedBucketer
from wenet_lhotse.loader.build import build_dataloader, resolve_mode
from wenet_lhotse.loader.config import BatchingConfig, LhotseConf, LoaderConfig
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
from wenet_lhotse.loader.lengths import CutLengths, FrameCounter
from wenet_lhotse.loader.mux import PositionedStream, ResumableMux
from wenet_lhotse.loader.readers import JsonlReader, ListReader, shar_reader
from wenet_lhotse.loader.sampler import ResumableBucketingSampler
from wenet_lhotse.loader.shar_audio import SharAudioAttacher
from wenet_lhotse.loader.streamed import StreamedEpochDataset
from wenet_lhotse.loader.wenet_dataset import make_wenet_dataset
from wenet_lhotse.sources import (
    SourceSpec,
    TagCuts,
    detect_source_type,
    mux_sources,
    open_source,
    parse_sources,
)

__all__ = [
    "BatchingConfig",
    "BucketBatchConstraint",
    "BucketingSampler",
    "CutLengths",
    "DataWaitMeter",
    "EpochLedger",
    "EqualStepsIterator",
    "FrameCounter",
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
    "SourceSpec",
    "StaticBatchConstraint",
    "SteppedBucketer",
    "StreamedDataLoader",
    "StreamedEpochDataset",
    "TagCuts",
    "build_dataloader",
    "detect_source_type",
    "make_wenet_dataset",
    "mux_sources",
    "open_source",
    "parse_sources",
    "plan_last_two_rounds",
    "plan_partition",
    "reduce_cv_loss",
    "resolve_mode",
    "shar_reader",
    "wenet_constraint",
    "world_info",
]
