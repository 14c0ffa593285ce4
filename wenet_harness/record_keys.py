"""Run a WeNet trainer module and record the keys of every batch WeNet's executor trains.

Usage: ``python -m wenet_harness.record_keys OUT_DIR MODULE ARGS...`` with ``MODULE``
``wenet.bin.train`` (WeNet's own loader) or ``wenet_lhotse.dropin.train`` (ours). Wraps
``wenet.utils.executor.batch_forward`` (the call every trained batch goes through, after
the executor's own ``wenet_join`` and empty-batch checks) to append ``{"epoch", "keys"}``
to ``OUT_DIR/keys_rank<RANK>.jsonl`` for train batches (tag ``TRAIN``); WeNet's code
is not edited. The same recorder for both loaders, so their trained keys can be compared.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
from pathlib import Path


def main() -> None:
    out, module = Path(sys.argv[1]), sys.argv[2]
    argv = sys.argv[3:]
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"keys_rank{os.environ.get('RANK', '0')}.jsonl"
    import wenet.utils.executor as executor

    forward = executor.batch_forward

    def recorded(model, batch, scaler, info_dict, device):
        if info_dict.get("tag") == "TRAIN":  # (executor.cv calls it too, tag "CV")
            with open(path, "a", encoding="utf-8") as f:
                f.write(json.dumps({"epoch": info_dict.get("epoch"),
                                    "keys": list(batch["keys"])}) + "\n")
        return forward(model, batch, scaler, info_dict, device)

    executor.batch_forward = recorded
    if module == "wenet_lhotse.dropin.train":
        from wenet_lhotse.dropin.train import main as run

        run(argv)
    else:
        sys.argv = [module] + argv
        runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
