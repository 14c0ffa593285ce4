"""Run WeNet's own ``wenet/bin/recognize.py`` on wenet-lhotse's reading, without editing it.

::

    export PYTHONPATH=/path/to/wenet:$PYTHONPATH
    python -m wenet_lhotse.dropin.recognize --config exp/train.yaml --data_type raw \\
        --test_data data/test/data.list --checkpoint exp/final.pt --result_dir exp/test \\
        --modes ctc_greedy_search attention --batch_size 16

Every argument is WeNet's. ``recognize.py`` does ``from wenet.dataset.dataset import
Dataset`` at import time; this replaces ``wenet.dataset.dataset.Dataset`` with
:func:`wenet_lhotse.dropin.compat.Dataset` first (input order, static batches of
``--batch_size``, dither 0 -- what recognize.py's ``test_conf`` asks for), so WeNet's
model, decoding and result files are WeNet's own.
"""

from __future__ import annotations

from typing import List, Optional

from wenet_lhotse.dropin.launch import import_wenet_module, log_stand_ins_once, run_patched


def patch_wenet() -> None:
    """Point WeNet's ``Dataset`` at ours. Raises ImportError without WeNet."""
    from wenet_lhotse.dropin.compat import Dataset

    import_wenet_module("wenet.dataset.dataset").Dataset = log_stand_ins_once(Dataset)


def main(argv: Optional[List[str]] = None, module: str = "wenet.bin.recognize") -> None:
    """Run ``module`` (WeNet's decoder) as ``__main__`` with ``argv`` as its arguments."""
    run_patched(patch_wenet, module, argv)


if __name__ == "__main__":
    main()
