"""WeNet batches from Lhotse cuts: the map-style dataset and WeNet's filter_conf."""

from wenet_lhotse.dataset.asr import IGNORE_ID, WenetAsrDataset
from wenet_lhotse.dataset.cut_fields import cut_lang, cut_speaker, cut_task, num_frames_10ms
from wenet_lhotse.dataset.filters import (
    REASONS,
    FilterConf,
    WenetFilter,
    filter_reason,
    filter_stats,
    wenet_filter,
)

__all__ = [
    "FilterConf",
    "IGNORE_ID",
    "REASONS",
    "WenetAsrDataset",
    "WenetFilter",
    "cut_lang",
    "cut_speaker",
    "cut_task",
    "filter_reason",
    "filter_stats",
    "num_frames_10ms",
    "wenet_filter",
]
