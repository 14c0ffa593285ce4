"""Conversions between WeNet data and Lhotse: import (raw list -> cuts manifest,
WeNet list -> Shar), export (cuts/Shar -> raw list or WeNet shards), and the
readers behind ``wenet-lhotse validate`` and ``wenet-lhotse stats``. Opening any input
is :mod:`wenet_lhotse.sources`; these tools sit on top of it.

Each submodule has one job:

* :mod:`.raw`      raw list -> ``cuts.jsonl.gz``, headers probed in parallel
* :mod:`.shar`     WeNet list -> Shar, parallel over output shards, restartable
* :mod:`.lossless` bit-exact audio encoding for Shar ("lossless" and "copy")
* :mod:`.export`   cuts/Shar -> raw list or WeNet shards
* :mod:`.check`    validate: read everything, list every problem
* :mod:`.stats`    duration / text-length statistics and histograms
"""

from wenet_lhotse.convert.check import ValidationResult, validate
from wenet_lhotse.convert.export import export_raw_list, export_shards
from wenet_lhotse.convert.lossless import CopyingSharWriter, LosslessAudioTarWriter
from wenet_lhotse.convert.raw import ImportResult, import_raw, iter_raw_cuts
from wenet_lhotse.convert.shar import SharConversion, shard_is_complete, wenet_to_shar
from wenet_lhotse.convert.stats import CorpusStats, corpus_stats, plot_stats

__all__ = [
    "CopyingSharWriter",
    "CorpusStats",
    "LosslessAudioTarWriter",
    "ImportResult",
    "SharConversion",
    "ValidationResult",
    "corpus_stats",
    "export_raw_list",
    "export_shards",
    "import_raw",
    "iter_raw_cuts",
    "plot_stats",
    "shard_is_complete",
    "validate",
    "wenet_to_shar",
]
