"""Run by torchrun from tests/test_multinode.py: one rank of a 2-node x 2-process job
(gloo on CPU, c10d rendezvous on 127.0.0.1).

Usage: ddp_multinode.py SOURCE OUT_DIR EPOCHS [STEP_SLEEP]
Writes OUT_DIR/rank<r>.json with the keys of every train batch of each epoch. With
STEP_SLEEP each step sleeps that long (seconds) after its collective, and
OUT_DIR/started.<r> appears after the first step (for the kill test).
"""

from __future__ import annotations

import datetime
import json
import sys
import time
from pathlib import Path

import torch.distributed as dist

from wenet_lhotse.loader.build import build_dataloader


class Keys:
    def __getitem__(self, cuts):
        return [c.id for c in cuts]


def main() -> None:
    source, out, epochs = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
    step_sleep = float(sys.argv[4]) if len(sys.argv) > 4 else 0.0
    # A bounded wait: a rank whose peer died fails within this, never hangs.
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank = dist.get_rank()
    conf = {"batch_conf": {"batch_type": "static", "batch_size": 2},
            "shuffle": True, "lhotse_conf": {"num_buckets": 1, "buffer_size": 20}}
    _, train = build_dataloader(source, None, conf, "train", dataset=Keys(), seed=3,
                                num_workers=1)
    record = []
    try:
        for _ in range(epochs):
            steps = []
            for batch in train:
                steps.append(batch)
                dist.barrier()  # a collective per step, as DDP's backward would do
                if step_sleep:
                    (out / f"started.{rank}").touch()
                    time.sleep(step_sleep)
            record.append(steps)
    except Exception as err:  # what a surviving rank saw when a peer died
        (out / f"error.{rank}").write_text(f"{type(err).__name__}: {err}"[:500])
        raise
    (out / f"rank{rank}.json").write_text(json.dumps({"epochs": record}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
