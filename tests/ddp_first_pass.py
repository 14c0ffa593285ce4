"""Run by torchrun from tests/test_loader_first_pass.py: one rank of a real DDP (gloo,
CPU) job training 3 epochs on a shard list without an index, with
``lhotse_conf.index_first_pass``. Usage: ddp_first_pass.py LIST EQUAL_LIST UNITS OUT_DIR
(EQUAL_LIST: the same tars, trained 2 epochs with equal steps).
Writes OUT_DIR/rank<r>.json (per epoch: mode, keys trained, ledger; the keys of the
first STEPS batches of epoch 1; the fragments after epoch 0, before MISSING are removed
to stand for tars not read to their end) and OUT_DIR/state<r>.pt (the loader state after those
STEPS batches of epoch 1). No audio decoding: the dataset returns the batch's keys."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from wenet_lhotse import build_dataloader
from wenet_lhotse.formats.index_fragments import FRAGMENTS
from wenet_lhotse.text import CharTokenizer

CONF = {"batch_conf": {"batch_type": "static", "batch_size": 3},
        "lhotse_conf": {"fault_tolerant": True, "num_buckets": 2, "equal_steps": False,
                        "index_first_pass": True}}
STEPS = 2  # batches of epoch 1 before the state is saved
MISSING = (2, 7)  # list lines whose fragments are removed after epoch 0


class KeysOnly:
    def __getitem__(self, cuts):
        return {"keys": [c.id for c in cuts]}


def main() -> None:
    shards, equal, units, out = sys.argv[1], sys.argv[2], sys.argv[3], Path(sys.argv[4])
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    _, loader = build_dataloader(shards, CharTokenizer(units), CONF, "train",
                                 dataset=KeysOnly(), seed=5, num_workers=2)
    epochs, before_state = [], []
    for epoch in range(3):
        keys = []
        for step, batch in enumerate(loader):
            keys += batch["keys"]
            if epoch == 1 and step + 1 == STEPS:
                torch.save(loader.state_dict(), out / f"state{rank}.pt")
                before_state = list(keys)
        epochs.append({"mode": loader.mode, "keys": keys,
                       "ledger": loader.epoch_ledger().as_dict()})
        if epoch == 0:  # what the readers recorded; two tars as if not read to their end
            dist.barrier()
            fragments = Path(shards + ".index" + FRAGMENTS)
            recorded = sorted(int(p.stem) for p in fragments.iterdir())
            dist.barrier()
            if rank == 0:
                for line in MISSING:
                    (fragments / f"{line}.json").unlink()
            dist.barrier()
    # our API's default for loops without a join: equal steps (epoch 0's rest counted
    # as left over, its tars still read to their end and recorded)
    conf = {**CONF, "lhotse_conf": {**CONF["lhotse_conf"], "equal_steps": True}}
    _, loader = build_dataloader(equal, CharTokenizer(units), conf, "train",
                                 dataset=KeysOnly(), seed=5, num_workers=2)
    equal_epochs = []
    for _ in range(2):
        keys = [k for batch in loader for k in batch["keys"]]
        equal_epochs.append({"mode": loader.mode, "keys": keys,
                             "ledger": loader.epoch_ledger().as_dict()})
    (out / f"rank{rank}.json").write_text(json.dumps({
        "epochs": epochs, "recorded": recorded, "before_state": before_state,
        "equal": equal_epochs}))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
