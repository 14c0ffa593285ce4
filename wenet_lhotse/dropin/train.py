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

from typing import List, Optional

from wenet_lhotse.dropin.launch import (
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


def main(argv: Optional[List[str]] = None, module: str = "wenet.bin.train") -> None:
    """Run ``module`` (WeNet's trainer) as ``__main__`` with ``argv`` as its arguments."""
    run_patched(patch_wenet, module, argv)


if __name__ == "__main__":
    main()
