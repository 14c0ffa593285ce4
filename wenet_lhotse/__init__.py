"""wenet-lhotse: WeNet speech-recognition training input on top of Lhotse.

The public API is re-exported here. Submodules are imported on first use
(PEP 562), so ``import wenet_lhotse`` stays cheap and never fails because an
optional package (torchaudio, sentencepiece, matplotlib) is missing.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable, Dict, List, Tuple

#: The one place the version is set (pyproject.toml reads it; `wenet-lhotse --version`).
__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS = {
    "generate_corpus": "wenet_lhotse.corpus",
    "CorpusPaths": "wenet_lhotse.corpus",
    "WenetDataError": "wenet_lhotse.errors",
    "WenetConfigError": "wenet_lhotse.errors",
    "check_dataset_conf": "wenet_lhotse.loader.config_check",
    "check_special_tokens": "wenet_lhotse.loader.config_check",
    "check_wenet_configs": "wenet_lhotse.loader.config_check",
    "load_wenet_yaml": "wenet_lhotse.loader.config_check",
    "compute_cmvn": "wenet_lhotse.convert.cmvn",
    "write_cmvn": "wenet_lhotse.convert.cmvn",
    "CmvnStats": "wenet_lhotse.convert.cmvn",
    "SkipReport": "wenet_lhotse.errors",
    "SkippedItem": "wenet_lhotse.errors",
    "read_wenet_list": "wenet_lhotse.sources",
    "read_raw_list": "wenet_lhotse.formats",
    "read_shard_list": "wenet_lhotse.formats",
    "write_raw_list": "wenet_lhotse.formats",
    "write_wenet_shards": "wenet_lhotse.formats",
    "ReadLimits": "wenet_lhotse.io.read_limits",
    "ReadPolicy": "wenet_lhotse.io.policy",
    "detect_data_type": "wenet_lhotse.sources",
    "InputKind": "wenet_lhotse.sources.kinds.base",
    "get_kind": "wenet_lhotse.sources.registry",
    "LazyWenetRawListIterator": "wenet_lhotse.formats",
    "LazyWenetShardIterator": "wenet_lhotse.formats",
    "kaldi_dir_to_raw_list": "wenet_lhotse.formats.kaldi",
    "import_raw": "wenet_lhotse.convert",
    "wenet_to_shar": "wenet_lhotse.convert",
    "read_shar": "wenet_lhotse.sources",
    "export_raw_list": "wenet_lhotse.convert",
    "export_shards": "wenet_lhotse.convert",
    "open_cuts": "wenet_lhotse.sources",
    "corpus_stats": "wenet_lhotse.convert",
    "plot_stats": "wenet_lhotse.convert",
    "ImportResult": "wenet_lhotse.convert",
    "SharConversion": "wenet_lhotse.convert",
    "CorpusStats": "wenet_lhotse.convert",
    "ValidationResult": "wenet_lhotse.convert",
    "WenetFbank": "wenet_lhotse.features",
    "WenetFbankConfig": "wenet_lhotse.features",
    "WenetMfcc": "wenet_lhotse.features",
    "WenetMfccConfig": "wenet_lhotse.features",
    "WhisperLogMel": "wenet_lhotse.features",
    "WhisperLogMelConfig": "wenet_lhotse.features",
    "extractor_from_wenet_conf": "wenet_lhotse.features",
    "PooledFeatures": "wenet_lhotse.features",
    "DeviceFeatures": "wenet_lhotse.features",
    "SpecAugConfig": "wenet_lhotse.features",
    "SpecSubConfig": "wenet_lhotse.features",
    "SpecTrimConfig": "wenet_lhotse.features",
    "CharTokenizer": "wenet_lhotse.text",
    "BpeTokenizer": "wenet_lhotse.text",
    "tokenizer_from_wenet_conf": "wenet_lhotse.text",
    "read_symbol_table": "wenet_lhotse.text",
    "write_char_units": "wenet_lhotse.text.units",
    "train_bpe_units": "wenet_lhotse.text.units",
    "WenetAsrDataset": "wenet_lhotse.dataset",
    "IGNORE_ID": "wenet_lhotse.dataset",
    "FilterConf": "wenet_lhotse.dataset",
    "wenet_filter": "wenet_lhotse.dataset",
    "filter_reason": "wenet_lhotse.dataset",
    "filter_stats": "wenet_lhotse.dataset",
    "build_dataloader": "wenet_lhotse.loader",
    "make_wenet_dataset": "wenet_lhotse.loader",
    "LhotseDataLoader": "wenet_lhotse.loader",
    "SourceSpec": "wenet_lhotse.sources",
    "mux_sources": "wenet_lhotse.sources",
    "open_source": "wenet_lhotse.sources",
    "LoaderConfig": "wenet_lhotse.loader",
    "LhotseConf": "wenet_lhotse.loader",
    "DataWaitMeter": "wenet_lhotse.loader",
    "EpochLedger": "wenet_lhotse.loader",
    "reduce_cv_loss": "wenet_lhotse.loader",
    "world_info": "wenet_lhotse.loader",
    "ResumableBucketingSampler": "wenet_lhotse.loader",
    "BucketingSampler": "wenet_lhotse.loader",
    "StaticBatchConstraint": "wenet_lhotse.loader",
    "MaxFramesConstraint": "wenet_lhotse.loader",
    "BucketBatchConstraint": "wenet_lhotse.loader",
    "init_dataset_and_dataloader": "wenet_lhotse.dropin",
    # issue 20: the shard index
    "index_shards": "wenet_lhotse.convert.index",
    "IndexSummary": "wenet_lhotse.convert.index",
    "ShardIndex": "wenet_lhotse.formats.shard_index",
    # issue 22: text / speech-only sources mixed by batch, groups, Parquet, 2D bins
    "read_text_source": "wenet_lhotse.sources.text",
    "flatten_sources": "wenet_lhotse.sources.groups",
    "temperature_reweighting": "wenet_lhotse.sources.groups",
    "LazyParquetCuts": "wenet_lhotse.sources.parquet",
    "ParquetColumns": "wenet_lhotse.sources.parquet",
    "import_parquet": "wenet_lhotse.convert.parquet",
    "export_parquet": "wenet_lhotse.convert.parquet",
    "KindDataset": "wenet_lhotse.dataset.text_batch",
    "BatchMuxSampler": "wenet_lhotse.loader.batch_mux",
    "TextBatchSampler": "wenet_lhotse.loader.text_sampler",
    "source_shares": "wenet_lhotse.loader.mixed",
    "Bucket2DConstraint": "wenet_lhotse.loader.constraint2d",
    "estimate_bins_2d": "wenet_lhotse.loader.bins2d",
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def lazy_exports(package: str, exports: Dict[str, str], namespace: Dict[str, Any]
                 ) -> Tuple[Callable[[str], Any], Callable[[], List[str]]]:
    """PEP 562 ``(__getattr__, __dir__)`` for a package whose public names (``exports``:
    name -> defining module) are imported on first use and then kept in ``namespace``
    (the package's ``globals()``), so ``import`` of the package stays light."""

    def getattr_(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    return getattr_, lambda: namespace["__all__"]


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
