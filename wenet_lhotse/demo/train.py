"""A compact CTC trainer driven by a WeNet yaml, through our loader.

It is the recipes' ``train.py`` and the demo's: the yaml is WeNet's
(``dataset_conf`` with an optional ``lhotse_conf``, ``tokenizer``/``tokenizer_conf``,
``optim_conf``, ``max_epoch``, ``grad_clip``) plus ``model_conf`` for
:class:`TinyCtcModel`. Single process::

    python -m wenet_lhotse.demo.train --config conf.yaml --train_data data/train/shar \\
        --cv_data data/dev/data.list --model_dir exp/tiny

and with DDP (gloo on CPU, NCCL on GPUs) under torchrun::

    torchrun --nproc_per_node=2 -m wenet_lhotse.demo.train --config conf.yaml ...

Per epoch it logs the mean train loss, the cv loss (partitioned across ranks and
all-reduced, so it equals the single-process value), throughput in audio
seconds per wall second (all ranks), the padding fraction and the fraction of
wall time spent waiting for data; rank 0 writes ``history.json``,
``history.png`` and ``final.pt`` to ``--model_dir``.
"""

from __future__ import annotations

import argparse
import logging
import os
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import torch
import torch.distributed as dist
import yaml

from wenet_lhotse.demo.model import TinyCtcModel
from wenet_lhotse.demo.stats import (
    TABLE_HEADER,
    BatchStats,
    EpochRecord,
    plot_history,
    save_history,
    table_row,
)

logger = logging.getLogger(__name__)


def _setup_distributed() -> tuple:
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if world_size > 1 and not dist.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        dist.init_process_group(backend)
    return world_size, rank


def _all_sum(values: List[float]) -> List[float]:
    t = torch.tensor(values, dtype=torch.float64)
    if dist.is_initialized():
        dist.all_reduce(t)
    return t.tolist()


def train(
    configs: Dict[str, Any],
    train_data: Any,
    cv_data: Optional[Any],
    model_dir: Path,
    *,
    num_workers: int = 1,
    seed: int = 777,
    max_epoch: Optional[int] = None,
    title: str = "",
    on_epoch: Optional[Callable[[EpochRecord], None]] = None,
) -> List[EpochRecord]:
    """Train :class:`TinyCtcModel` and return the per-epoch records (on every rank).

    :param configs: the parsed WeNet yaml.
    :param train_data: a source path (raw list, shard list, cuts manifest, Shar dir) or
        a list of source specs (see ``lhotse_conf.sources``); ignored when the yaml's
        ``lhotse_conf.sources`` is set.
    :param num_workers: DataLoader worker processes per rank.
    :param on_epoch: called with each epoch's record on rank 0 (default: log a table row).
    """
    from wenet_lhotse.features import extractor_from_wenet_conf
    from wenet_lhotse.loader import DataWaitMeter, build_dataloader, reduce_cv_loss
    from wenet_lhotse.text import tokenizer_from_wenet_conf

    world_size, rank = _setup_distributed()
    torch.manual_seed(seed)
    # One compute thread per rank: DataLoader workers and other ranks share the cores.
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // (world_size * (1 + num_workers))))
    conf = configs["dataset_conf"]
    lconf = conf.get("lhotse_conf") or {}
    tokenizer = tokenizer_from_wenet_conf(configs)
    configs["vocab_size"] = tokenizer.vocab_size()
    _, train_loader = build_dataloader(lconf.get("sources") or train_data, tokenizer, conf,
                                       "train", num_workers=num_workers, seed=seed)
    cv_loader = None
    if cv_data is not None or lconf.get("cv_sources"):
        _, cv_loader = build_dataloader(lconf.get("cv_sources") or cv_data, tokenizer, conf,
                                        "cv", num_workers=num_workers, seed=seed)

    # The feature dimension the yaml's feats_type/*_conf give (WeNet's defaults included)
    feat_dim = extractor_from_wenet_conf(conf).feature_dim(16000)
    model = TinyCtcModel(tokenizer.vocab_size(), num_mel_bins=feat_dim,
                         **(configs.get("model_conf") or {}))
    wrapped = torch.nn.parallel.DistributedDataParallel(model) if world_size > 1 else model
    optim = torch.optim.Adam(model.parameters(), **(configs.get("optim_conf") or {"lr": 2e-3}))
    grad_clip = float(configs.get("grad_clip", 5.0))
    epochs = max_epoch or int(configs.get("max_epoch", 10))

    history: List[EpochRecord] = []
    for epoch in range(epochs):
        wrapped.train()
        stats, meter = BatchStats(), DataWaitMeter()
        loss_sum = 0.0
        start = time.perf_counter()
        for batch in meter.wrap(train_loader):  # each iter() is the next epoch
            if not batch["keys"]:
                continue  # every cut of the batch failed in fault-tolerant mode
            out = wrapped(batch)
            optim.zero_grad()
            out["loss"].backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
            optim.step()
            loss_sum += float(out["loss_sum"])
            stats.add(batch)
        wall = time.perf_counter() - start
        tot_loss, tot_utts, tot_frames, tot_padded = _all_sum(
            [loss_sum, stats.utterances, stats.frames, stats.padded_frames])
        cv_loss = _cv_loss(model, cv_loader, reduce_cv_loss) if cv_loader is not None else None
        rec = EpochRecord(
            epoch=epoch, train_loss=tot_loss / max(tot_utts, 1), cv_loss=cv_loss,
            audio_seconds=tot_frames * 0.01, wall_seconds=wall,
            throughput=tot_frames * 0.01 / wall if wall > 0 else 0.0,
            padding_fraction=1.0 - tot_frames / tot_padded if tot_padded else 0.0,
            data_wait_fraction=meter.fraction, batches=stats.batches,
            mean_batch_size=stats.utterances / max(stats.batches, 1))
        history.append(rec)
        if rank == 0:
            if on_epoch is not None:
                on_epoch(rec)
            else:
                if epoch == 0:
                    logger.info("table: %s", TABLE_HEADER)
                logger.info("table: %s", table_row(rec))
    if rank == 0:
        model_dir.mkdir(parents=True, exist_ok=True)
        torch.save(model.state_dict(), model_dir / "final.pt")
        save_history(history, model_dir / "history.json")
        plot_history({title or "train": history}, model_dir / "history.png", title=title)
    return history


@torch.no_grad()
def _cv_loss(model: TinyCtcModel, loader, reduce_cv_loss) -> float:
    model.eval()
    loss_sum, count = 0.0, 0
    for batch in loader:
        if batch["keys"]:
            out = model(batch)
            loss_sum += float(out["loss_sum"])
            count += int(out["num_utts"])
    loss, _ = reduce_cv_loss(loss_sum, count)
    return loss


def main(argv: Optional[List[str]] = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", required=True, help="WeNet-style yaml")
    p.add_argument("--train_data", help="raw list, shard list, cuts manifest or Shar dir")
    p.add_argument("--cv_data", default=None)
    p.add_argument("--model_dir", required=True)
    p.add_argument("--num_workers", type=int, default=1)
    p.add_argument("--seed", type=int, default=777)
    p.add_argument("--max_epoch", type=int, default=None)
    p.add_argument("--title", default="")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    with open(args.config, encoding="utf-8") as f:
        configs = yaml.safe_load(f)
    train(configs, args.train_data, args.cv_data, Path(args.model_dir),
          num_workers=args.num_workers, seed=args.seed, max_epoch=args.max_epoch,
          title=args.title)
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
