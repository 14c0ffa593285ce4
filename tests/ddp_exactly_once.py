"""Run by torchrun from tests/test_loader_exactly_once.py: one rank of a real DDP (gloo,
CPU) job that runs several loader configurations in sequence over WeNet tar shards.

Usage: ddp_exactly_once.py CONFIGS_JSON OUT_DIR
CONFIGS_JSON: a list of {"name", "shards", "num_workers", "equal_steps", "epochs"}.
Writes OUT_DIR/rank<r>.json: per configuration, per epoch, the keys of each step, the
epoch ledger (loader.epoch_ledger()) and the skipped items' sources.
No model and no audio decoding: the dataset returns the batch's keys, as WeNet's batch
dict does, so only the loader (tars, filters, sampler, workers, ranks) is exercised.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch.distributed as dist

from wenet_lhotse import build_dataloader


class Letters:
    """A WeNet-style tokenizer: one token per character."""

    def tokenize(self, line: str):
        return list(line), [1] * len(line)

    def vocab_size(self) -> int:
        return 2


class KeysOnly:
    """A map-style dataset returning WeNet's ``keys`` field only."""

    def __getitem__(self, cuts):
        return {"keys": [c.id for c in cuts]}


def run(cfg: dict) -> list:
    conf = {"batch_conf": {"batch_type": "static", "batch_size": 4},
            "filter_conf": {"min_length": 10, "max_length": 40},  # frames of 10 ms
            "shuffle": True,
            "lhotse_conf": {"fault_tolerant": True, "num_buckets": 2, "buffer_size": 50,
                            "duration_bins": [0.3], "equal_steps": cfg["equal_steps"]}}
    _, loader = build_dataloader(cfg["shards"], Letters(), conf, "train", dataset=KeysOnly(),
                                 seed=3, num_workers=cfg["num_workers"])
    epochs = []
    for _ in range(cfg["epochs"]):
        steps = [batch["keys"] for batch in loader]
        led = loader.epoch_ledger()
        epochs.append({"steps": steps, "ledger": led.as_dict() if led else None})
    epochs[-1]["skips"] = [i.source for i in loader.skip_report]
    return epochs


def main() -> None:
    configs, out = json.loads(Path(sys.argv[1]).read_text()), sys.argv[2]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    results = {}
    for cfg in configs:
        results[cfg["name"]] = run(cfg)
        dist.barrier()  # uneven steps are fine here: nothing collective per step
    Path(out, f"rank{rank}.json").write_text(json.dumps(results))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
