"""Run by torchrun from tests/test_loader_matrix.py: one rank of a real DDP (gloo, CPU)
job that walks the guarantee matrix's cells for this world size in one process.

Usage: ddp_matrix.py CELLS_JSON UNITS OUT_DIR
CELLS_JSON: a list of {"name", "sources", "num_workers", "epochs"}. Writes
OUT_DIR/rank<r>.json: per cell, per epoch, the keys trained and the epoch ledger, or the
refusal (the one-line error building or iterating the loader raised).
No audio decoding: the dataset returns the batch's keys, as WeNet's batch dict does.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch.distributed as dist

from wenet_lhotse import build_dataloader
from wenet_lhotse.text import CharTokenizer

CONF = {"batch_conf": {"batch_type": "static", "batch_size": 3},
        "lhotse_conf": {"fault_tolerant": True, "num_buckets": 2, "equal_steps": False}}


class KeysOnly:
    def __getitem__(self, cuts):
        return {"keys": [c.id for c in cuts]}


def run(cell: dict, tok: CharTokenizer) -> dict:
    try:
        _, loader = build_dataloader(cell["sources"], tok, CONF, "train", dataset=KeysOnly(),
                                     seed=5, num_workers=cell["num_workers"])
    except ValueError as err:
        return {"refused": str(err)}
    epochs = []
    for _ in range(cell["epochs"]):
        keys = [k for batch in loader for k in batch["keys"]]
        led = loader.epoch_ledger()
        epochs.append({"keys": keys, "ledger": led.as_dict()})
    return {"epochs": epochs, "mode": loader.mode}


def main() -> None:
    cells, units, out = json.loads(Path(sys.argv[1]).read_text()), sys.argv[2], sys.argv[3]
    dist.init_process_group("gloo")
    tok = CharTokenizer(units)
    results = {}
    for cell in cells:
        results[cell["name"]] = run(cell, tok)
        dist.barrier()
    Path(out, f"rank{dist.get_rank()}.json").write_text(json.dumps(results))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
