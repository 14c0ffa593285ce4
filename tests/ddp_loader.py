"""Run by torchrun from tests/test_loader_ddp.py: one rank of a real DDP (gloo, CPU) job.

Usage: ddp_loader.py MODE SOURCE CV_SOURCE OUT_DIR [MODE SOURCE CV_SOURCE OUT_DIR ...]
Per group, in order, in one process group (one launch for several cases): writes
OUT_DIR/rank<r>.json with the keys of every train batch of two epochs, the cv keys, and
the cv "loss" (sum of durations) reduced with reduce_cv_loss.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch.distributed as dist

from wenet_lhotse.loader.build import build_dataloader
from wenet_lhotse.loader.distributed import reduce_cv_loss


class KeysAndDurations:
    """A real map-style dataset: batch -> (keys, durations); no audio needed."""

    def __getitem__(self, cuts):
        return [(c.id, c.duration) for c in cuts]


def main() -> None:
    args = sys.argv[1:]
    dist.init_process_group("gloo")
    for i in range(0, len(args), 4):
        run(*args[i:i + 4])
        dist.barrier()
    dist.destroy_process_group()


def run(mode: str, source: str, cv_source: str, out: str) -> None:
    """One case: MODE's loader over SOURCE (train, 2 epochs) and CV_SOURCE (cv)."""
    rank = dist.get_rank()
    conf = {"batch_conf": {"batch_type": "dynamic", "max_frames_in_batch": 900},
            "lhotse_conf": {"num_buckets": 3, "buffer_size": 40, "mode": mode}}
    _, train = build_dataloader(source, None, conf, "train", dataset=KeysAndDurations(),
                                seed=7, num_workers=1)
    epochs = []
    for _ in range(2):
        steps = []
        for batch in train:
            steps.append([k for k, _ in batch])
            dist.barrier()  # a collective per step, as DDP's backward would do
        epochs.append(steps)
    resumed_ok = None
    if mode == "map":
        # Resume under DDP: every rank restores rank 0's state and continues exactly.
        def make():
            return build_dataloader(source, None, conf, "train", dataset=KeysAndDurations(),
                                    seed=7, num_workers=1)[1]

        ref = make()
        it = iter(ref)
        [next(it) for _ in range(2)]
        state = [ref.state_dict()]
        dist.broadcast_object_list(state, src=0)
        expected = list(it)
        fresh = make()
        fresh.load_state_dict(state[0])
        resumed_ok = list(fresh) == expected
    _, cv = build_dataloader(cv_source, None, conf, "cv", dataset=KeysAndDurations(), seed=7)
    cv_keys, loss_sum, count = [], 0.0, 0
    for batch in cv:
        cv_keys.extend(k for k, _ in batch)
        loss_sum += sum(d for _, d in batch)
        count += len(batch)
        dist.barrier()
    mean, total = reduce_cv_loss(loss_sum, count)
    Path(out, f"rank{rank}.json").write_text(json.dumps(
        {"epochs": epochs, "cv_keys": cv_keys, "cv_mean": mean, "cv_count": total,
         "resumed_ok": resumed_ok}))


if __name__ == "__main__":
    main()
