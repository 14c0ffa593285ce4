"""Run by torchrun from tests/test_loader_elastic.py: one rank of a real DDP (gloo, CPU)
job, map-style loading of a cuts manifest.

Usage: ddp_elastic.py first MANIFEST OUT_DIR STEPS -- train STEPS batches, write
OUT_DIR/first<r>.json (keys) and OUT_DIR/state<r>.pt (loader.state_dict());
ddp_elastic.py rest MANIFEST OUT_DIR 0 -- load OUT_DIR/state0.pt (saved on another world
size), train the rest of the epoch, write OUT_DIR/rest<r>.json (keys of each step).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from wenet_lhotse import build_dataloader

CONF = {"batch_conf": {"batch_type": "static", "batch_size": 3}, "shuffle": True,
        "lhotse_conf": {"mode": "map", "buffer_size": 40, "num_buckets": 3}}


class Keys:
    def __getitem__(self, cuts):
        return {"keys": [c.id for c in cuts]}


def main() -> None:
    phase, manifest, out, steps = sys.argv[1], sys.argv[2], Path(sys.argv[3]), int(sys.argv[4])
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    _, dl = build_dataloader(manifest, None, CONF, "train", dataset=Keys(), seed=5,
                             num_workers=1)
    if phase == "first":
        it = iter(dl)
        keys = []
        for _ in range(steps):
            keys += next(it)["keys"]
            dist.barrier()
        torch.save(dl.state_dict(), out / f"state{rank}.pt")
        (out / f"first{rank}.json").write_text(json.dumps(keys))
    else:
        dl.load_state_dict(torch.load(out / "state0.pt"))
        batches = []
        for batch in dl:
            batches.append(batch["keys"])
            dist.barrier()
        (out / f"rest{rank}.json").write_text(json.dumps(batches))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
