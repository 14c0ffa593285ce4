"""Run by torchrun from tests/test_loader_index.py: one rank of a real DDP (gloo, CPU)
job over an indexed WeNet shard list, through ``build_dataloader`` or the drop-in.

Usage: ddp_index.py HOW LIST UNITS OUT_DIR   (HOW: build | dropin | window: build with
``read_window_mb``)
Writes OUT_DIR/rank<r>.json: the keys of every train step of two epochs, the loader's
class, and the skips counted.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import torch.distributed as dist

from wenet_lhotse.cli.bench_cmd import AISHELL_DATASET_CONF
from wenet_lhotse.dropin.compat import init_dataset_and_dataloader
from wenet_lhotse.loader.build import build_dataloader
from wenet_lhotse.text.tokenizer import CharTokenizer


class Keys:
    def __getitem__(self, cuts):
        return {"keys": [c.id for c in cuts]}


def main() -> None:
    how, source, units, out = sys.argv[1:5]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    lconf = {"fault_tolerant": True, "num_buckets": 3, "buffer_size": 40}
    if how == "window":
        lconf["read_window_mb"] = 0.4  # windows of two or three of the test's tars
    if how in ("build", "window"):
        conf = {"batch_conf": {"batch_type": "dynamic", "max_frames_in_batch": 900},
                "lhotse_conf": lconf}
        _, train = build_dataloader(source, None, conf, "train", dataset=Keys(), seed=7,
                                    num_workers=1)
    else:
        conf = copy.deepcopy(AISHELL_DATASET_CONF)
        conf["batch_conf"] = {"batch_type": "static", "batch_size": 3}
        conf["lhotse_conf"] = lconf
        args = SimpleNamespace(train_data=source, cv_data=source, data_type="shard",
                               num_workers=1, pin_memory=False, prefetch=2)
        _, _, train, _ = init_dataset_and_dataloader(args, {"dataset_conf": conf},
                                                     CharTokenizer(units))
    epochs = []
    for _ in range(2):
        steps = []
        for batch in train:
            steps.append(list(batch["keys"]))
            dist.barrier()  # a collective per step, as DDP's backward would do
        epochs.append(steps)
    Path(out, f"rank{rank}.json").write_text(json.dumps(
        {"epochs": epochs, "loader": type(train).__name__,
         "skips": sorted({(i.source, i.kind) for i in train.skip_report})}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
