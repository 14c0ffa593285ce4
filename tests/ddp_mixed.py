"""Run by torchrun from tests/test_loader_mixed_ddp.py: one rank of a real DDP (gloo, CPU)
job over a mixed speech + text stream (mixing by batch), through the real dataset.

Usage: ddp_mixed.py SOURCES_JSON UNITS OUT_DIR
Writes OUT_DIR/rank<r>.json: (kind, keys) of every batch of two epochs, and whether a
loader restored from rank 0's mid-epoch state continued exactly.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch.distributed as dist

from wenet_lhotse import CharTokenizer
from wenet_lhotse.loader.build import build_dataloader

CONF = {"batch_conf": {"batch_type": "static", "batch_size": 3},
        "fbank_conf": {"num_mel_bins": 40, "frame_length": 25, "frame_shift": 10, "dither": 0.0},
        "lhotse_conf": {"num_buckets": 2, "max_tokens_in_batch": 64}}


def main() -> None:
    sources, units, out = json.loads(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    tok = CharTokenizer(units)

    def make():
        return build_dataloader(sources, tok, CONF, "train", seed=11, num_workers=1)[1]

    loader = make()
    epochs = []
    for _ in range(2):
        steps = []
        for batch in loader:
            steps.append([batch["kind"], list(batch["keys"]),
                          list(batch["feats"].shape) if "feats" in batch else None])
            dist.barrier()  # a collective per step, as DDP's backward would do
        epochs.append(steps)
    ref = make()
    it = iter(ref)
    [next(it) for _ in range(3)]
    state = [ref.state_dict()]
    dist.broadcast_object_list(state, src=0)
    expected = [(b["kind"], b["keys"]) for b in it]
    fresh = make()
    fresh.load_state_dict(state[0])
    resumed_ok = [(b["kind"], b["keys"]) for b in fresh] == expected
    (out / f"rank{rank}.json").write_text(json.dumps({"epochs": epochs,
                                                      "resumed_ok": resumed_ok}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
