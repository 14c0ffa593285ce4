"""Stand-in for ``deepspeed`` (not installable here: it needs CUDA to build).

Only what WeNet's ``wenet/utils/train_utils.py`` touches with ``--train_engine torch_ddp``:
``add_config_arguments`` (adds the two flags real DeepSpeed adds, so WeNet's argparse
namespace has the same attributes). Anything DeepSpeed-specific raises.
"""

import argparse


def add_config_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    group = parser.add_argument_group("DeepSpeed", "DeepSpeed configurations")
    group.add_argument("--deepspeed", default=False, action="store_true")
    group.add_argument("--deepspeed_config", default=None, type=str)
    return parser


def _unavailable(*args, **kwargs):
    raise RuntimeError("deepspeed stand-in: use --train_engine torch_ddp")


init_distributed = _unavailable
initialize = _unavailable
