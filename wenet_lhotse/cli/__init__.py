"""Command-line interface: ``wenet-lhotse --help``."""

# Each module registers its subcommands on ``main`` when imported.
from wenet_lhotse.cli import (  # noqa: F401
    bench_cmd,
    calibrate_cmd,
    cmvn_cmd,
    corpus_cmd,
    data,
    demo_cmd,
    estimate_bins_cmd,
    index_cmd,
    kaldi_cmd,
    parquet_cmd,
    plot_cmd,
)
from wenet_lhotse.cli.main import main

__all__ = ["main"]
