"""Command-line interface: ``wenet-lhotse --help``."""

from wenet_lhotse.cli.main import main

# Each module registers its subcommands on ``main`` when imported.
from wenet_lhotse.cli import corpus_cmd, kaldi_cmd  # noqa: E402,F401
from wenet_lhotse.cli import data  # noqa: E402,F401

__all__ = ["main"]
