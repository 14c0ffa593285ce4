"""Run by torchrun from tests/test_loader_matrix.py: one rank of a real DDP (gloo, CPU)
job that walks the guarantee matrix's cells for this world size in one process.

Usage: ddp_matrix.py CELLS_JSON UNITS OUT_DIR
CELLS_JSON: a list of {"name", "sources", "num_workers", "epochs", optional "lhotse_conf"
(keys over CONF's), optional "resume": {"from_ws", "steps"}}. Writes OUT_DIR/rank<r>.json:
per cell, per epoch, the keys trained and the epoch ledger, or the refusal (the one-line
error building or iterating the loader, or restoring its state, raised).

A resume cell trains ``steps`` batches of epoch 0 on ``from_ws`` ranks and saves the
state; a new loader on this job's ranks restores it and trains the rest of the epoch,
then one more epoch. With ``from_ws`` equal to this world size the first half runs on the
real ranks and each rank restores its own state (the drop-in's resume); with another
``from_ws`` (elastic) every rank plays the ``from_ws`` ranks of the first half itself, in
turn (``world_size``/``rank`` arguments: the same calls on every rank), and restores
rank 0's state, as the drop-in does when its rank saved none.
No audio decoding: the dataset returns the batch's keys, as WeNet's batch dict does.
"""

from __future__ import annotations

import copy
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


def _loader(cell: dict, tok: CharTokenizer, **world) -> object:
    conf = copy.deepcopy(CONF)
    conf["lhotse_conf"].update(cell.get("lhotse_conf", {}))
    return build_dataloader(cell["sources"], tok, conf, "train", dataset=KeysOnly(), seed=5,
                            num_workers=cell["num_workers"], **world)[1]


def _epoch(loader) -> dict:
    keys = [k for batch in loader for k in batch["keys"]]
    return {"keys": keys, "ledger": loader.epoch_ledger().as_dict()}


def run(cell: dict, tok: CharTokenizer) -> dict:
    try:
        loader = _loader(cell, tok)
    except ValueError as err:
        return {"refused": str(err)}
    epochs = [_epoch(loader) for _ in range(cell["epochs"])]
    return {"epochs": epochs, "mode": loader.mode}


def _first_half(cell: dict, tok: CharTokenizer, **world: int) -> tuple:
    loader = _loader(cell, tok, **world)
    it = iter(loader)
    keys = [k for _ in range(cell["resume"]["steps"]) for k in next(it)["keys"]]
    state = json.loads(json.dumps(loader.state_dict()))  # plain data, as saved
    del it
    return keys, state


def resume(cell: dict, tok: CharTokenizer) -> dict:
    ws, rank = dist.get_world_size(), dist.get_rank()
    from_ws = cell["resume"]["from_ws"]
    if from_ws == ws:
        first, state = _first_half(cell, tok)
    else:  # every rank plays the saving job's ranks in turn; rank 0's state resumes
        halves = [_first_half(cell, tok, world_size=from_ws, rank=r)
                  for r in range(from_ws)]
        first = [k for keys, _ in halves for k in keys] if rank == 0 else []
        state = halves[0][1]
    loader = _loader(cell, tok)
    try:
        loader.load_state_dict(state)
    except ValueError as err:
        return {"refused": str(err), "first": first}
    return {"first": first, "rest": _epoch(loader), "next": _epoch(loader),
            "mode": loader.mode}


def main() -> None:
    cells, units, out = json.loads(Path(sys.argv[1]).read_text()), sys.argv[2], sys.argv[3]
    dist.init_process_group("gloo")
    tok = CharTokenizer(units)
    results = {}
    for cell in cells:
        results[cell["name"]] = (resume if "resume" in cell else run)(cell, tok)
        dist.barrier()
    Path(out, f"rank{dist.get_rank()}.json").write_text(json.dumps(results))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
