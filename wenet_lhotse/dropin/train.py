"""Run WeNet's own ``wenet/bin/train.py`` on wenet-lhotse's loader, without editing it.

::

    export PYTHONPATH=/path/to/wenet:$PYTHONPATH
    torchrun --nproc_per_node=8 -m wenet_lhotse.dropin.train --config conf/train.yaml \\
        --data_type raw --train_data data/train/data.list --cv_data data/dev/data.list ...

(``--train_data`` may also name a Lhotse Shar directory or cuts manifest.)

Every argument is WeNet's. Before WeNet's ``train.py`` is imported, this replaces
``wenet.utils.train_utils.init_dataset_and_dataloader`` with
:func:`wenet_lhotse.dropin.compat.init_dataset_and_dataloader` (same signature,
return value and side effect), so ``train.py``'s own
``from wenet.utils.train_utils import init_dataset_and_dataloader`` picks ours.
This is the one-import change, done for you. It also saves the loader's position
beside WeNet's checkpoints and restores it on ``--checkpoint`` (mid-epoch resume; see
:mod:`wenet_lhotse.dropin.resume`).

Neither torchaudio nor deepspeed needs to be installed (WeNet imports them but does not
call them with the drop-in serving data: :mod:`wenet_lhotse.dropin.shims`), and errors are
one line, per rank under torchrun (:mod:`wenet_lhotse.dropin.launch`).
"""

from __future__ import annotations

import logging
import os
import sys
from typing import List, Optional

from wenet_lhotse.dropin.launch import (
    fail,
    import_wenet_module,
    log_stand_ins_once,
    run_patched,
)
from wenet_lhotse.dropin.resume import install as install_resume


def patch_wenet() -> None:
    """Point WeNet's loader factory at ours. Raises ImportError without WeNet."""
    from wenet_lhotse.dropin.compat import init_dataset_and_dataloader

    train_utils = import_wenet_module("wenet.utils.train_utils")
    train_utils.init_dataset_and_dataloader = log_stand_ins_once(init_dataset_and_dataloader)
    install_resume()  # loader state beside WeNet's checkpoints (see dropin.resume)


def check_engine_args(argv: List[str]) -> None:
    """Two mistakes of a first run, each one line before WeNet's ``train.py`` runs: WeNet's
    ``get_args`` only asserts that ``--train_engine deepspeed`` comes with
    ``--deepspeed_config`` (a bare ``AssertionError`` and its traceback), and its default
    ``--device cuda`` on a machine without CUDA ends in ``AttributeError: module
    'torch._C' has no attribute '_cuda_setDevice'`` (129 lines)."""
    engine = _flag(argv, "--train_engine")
    has_config = any(a == "--deepspeed_config" or a.startswith("--deepspeed_config=")
                     for a in argv)
    if engine == "deepspeed" and not has_config:
        fail("--train_engine deepspeed needs --deepspeed_config FILE (DeepSpeed's json, "
             "which WeNet asserts is given); or train with --train_engine torch_ddp")
    device = _flag(argv, "--device") or "cuda"  # WeNet's default
    if device == "cuda" and "--help" not in argv and "-h" not in argv:
        import torch

        if not torch.cuda.is_available():
            fail(f"--device {device}{'' if _flag(argv, '--device') else ' (WeNet default)'}"
                 ", but CUDA is not available here: on a CPU-only machine add --device cpu "
                 "--ddp.dist_backend gloo")


def _flag(argv: List[str], name: str) -> Optional[str]:
    """The value of ``name VALUE`` / ``name=VALUE`` in ``argv`` (the last one), else None."""
    value = None
    for i, a in enumerate(argv):
        if a == name and i + 1 < len(argv):
            value = argv[i + 1]
        elif a.startswith(name + "="):
            value = a.split("=", 1)[1]
    return value


def main(argv: Optional[List[str]] = None, module: str = "wenet.bin.train") -> None:
    """Run ``module`` (WeNet's trainer) as ``__main__`` with ``argv`` as its arguments."""
    args = list(sys.argv[1:] if argv is None else argv)

    def patch() -> None:
        patch_wenet()  # first: without WeNet, that is the line to see
        check_engine_args(args)

    run_patched(patch, module, argv)
    repair_final_link(args)


def repair_final_link(argv: List[str]) -> None:
    """WeNet's ``train.py`` ends by linking ``final.pt`` to ``<last epoch>.pt``, a name it
    never writes (its checkpoints are ``epoch_<N>.pt``): on rank 0, point the link at
    ``epoch_<N>.pt`` when that is the file, and say so."""
    model_dir = _flag(argv, "--model_dir")
    if not model_dir or os.environ.get("RANK", "0") != "0":
        return
    final = os.path.join(model_dir, "final.pt")
    if not os.path.islink(final) or os.path.exists(final):
        return
    target = os.readlink(final)
    real = f"epoch_{target}"
    if os.path.dirname(target) or not os.path.isfile(os.path.join(model_dir, real)):
        return
    tmp = f"{final}.{os.getpid()}.tmp"
    os.symlink(real, tmp)
    os.replace(tmp, final)  # atomic
    logging.getLogger(__name__).info("final.pt now links to %s (WeNet's train.py linked it "
                                     "to %s, which it does not write)", real, target)


if __name__ == "__main__":
    main()
