"""Run by torchrun from tests/test_hardening_training.py: one rank of a real DDP (gloo,
CPU) job whose shard list gives rank 1 only a garbage tar (fault-tolerant mode).

Usage: ddp_empty_rank.py SHARD_LIST UNITS OUT_DIR
Writes OUT_DIR/rank<r>.json: steps taken, the error raised (if any), the skips.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch.distributed as dist

from wenet_lhotse import CharTokenizer, build_dataloader


def main() -> None:
    shard_list, units, out = sys.argv[1:4]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    conf = {"fbank_conf": {"num_mel_bins": 23}, "lhotse_conf": {"fault_tolerant": True}}
    _, loader = build_dataloader(shard_list, CharTokenizer(units), conf, "train",
                                 num_workers=1)
    steps, error = 0, None
    try:
        for _ in loader:
            steps += 1
    except RuntimeError as err:
        error = str(err)
    skips = [(i.kind, i.source) for i in loader.skip_report]
    Path(out, f"rank{rank}.json").write_text(json.dumps(
        {"steps": steps, "error": error, "skips": skips}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
