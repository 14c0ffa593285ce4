"""The demo: a WeNet-format corpus, imported to Lhotse, trained single-process and with DDP.

Everything runs on a CPU from data the package generates (no downloads):

1. a synthetic corpus in WeNet format: raw ``data.list``, wavs and tar shards,
   plus a cv set;
2. ``wenet-lhotse import``'s two paths: raw list -> ``cuts.jsonl.gz``, shards -> Shar;
3. :mod:`wenet_lhotse.demo.train` single-process on the Shar directory
   (map-style, rank-aware bucketing);
4. the same with 2 DDP ranks (torchrun, gloo) reading the WeNet tar shards
   directly (streamed, each rank its own shards, equal steps);
5. a summary table and ``demo.png`` (loss curves, throughput, padding, data wait).
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List

import yaml

from wenet_lhotse.demo.stats import (
    TABLE_HEADER,
    EpochRecord,
    load_history,
    plot_history,
    table_row,
)

logger = logging.getLogger(__name__)


@dataclass
class DemoSize:
    train_utterances: int
    cv_utterances: int
    shard_size: int
    epochs: int
    ddp_epochs: int


FULL = DemoSize(train_utterances=300, cv_utterances=40, shard_size=50, epochs=10, ddp_epochs=12)
QUICK = DemoSize(train_utterances=48, cv_utterances=12, shard_size=12, epochs=2, ddp_epochs=2)


def demo_config(units: Path) -> Dict:
    """A WeNet-style yaml (aishell's dataset_conf, scaled down) for the demo model."""
    return {
        "dataset_conf": {
            "filter_conf": {"max_length": 40960, "min_length": 0, "token_max_length": 200,
                            "token_min_length": 1},
            "resample_conf": {"resample_rate": 16000},
            "speed_perturb": False,
            "feats_type": "fbank",
            "fbank_conf": {"num_mel_bins": 40, "frame_shift": 10, "frame_length": 25,
                           "dither": 0.1},
            "spec_aug": True,
            "spec_aug_conf": {"num_t_mask": 1, "num_f_mask": 1, "max_t": 20, "max_f": 5},
            "shuffle": True,
            "batch_conf": {"batch_type": "dynamic", "max_frames_in_batch": 4000},
            "lhotse_conf": {"num_buckets": 10},
        },
        "tokenizer": "char",
        "tokenizer_conf": {"symbol_table_path": str(units), "split_with_space": False},
        "model_conf": {"hidden": 96, "num_layers": 2},
        "optim_conf": {"lr": 0.002},
        "grad_clip": 5,
    }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_demo(out_dir: Path, size: DemoSize = FULL, jobs: int = 2,
             echo: Callable[[str], None] = print) -> Dict[str, List[EpochRecord]]:
    """Run the whole demo under ``out_dir``; returns ``{run label: history}``."""
    from wenet_lhotse.convert import import_raw, wenet_to_shar
    from wenet_lhotse.corpus import generate_corpus
    from wenet_lhotse.demo.train import train

    t0 = time.perf_counter()
    out_dir = Path(out_dir).absolute()
    echo(f"[1/5] generating a WeNet-format corpus under {out_dir}")
    tr = generate_corpus(out_dir / "data" / "train", num_utterances=size.train_utterances,
                         max_duration=4.0, shard_size=size.shard_size, seed=1)
    cv = generate_corpus(out_dir / "data" / "dev", num_utterances=size.cv_utterances,
                         max_duration=4.0, seed=2)
    echo(f"      train: {len(tr.keys)} utterances, {tr.total_duration / 60:.1f} min "
         f"(raw list + {tr.shards_list.read_text().count(chr(10))} tar shards); "
         f"cv: {len(cv.keys)} utterances")

    echo("[2/5] importing: raw list -> Lhotse cuts manifest, tar shards -> Lhotse Shar")
    res = import_raw(tr.data_list, out_dir / "data" / "train" / "cuts.jsonl.gz",
                     num_workers=jobs)
    shar_dir = out_dir / "data" / "train" / "shar"
    conv = wenet_to_shar(tr.shards_list, shar_dir, num_jobs=jobs)
    echo(f"      {res.num_cuts} cuts -> {out_dir / 'data/train/cuts.jsonl.gz'}; "
         f"{conv.num_shards} Shar shards -> {shar_dir}")

    conf_path = out_dir / "conf.yaml"
    conf_path.write_text(yaml.safe_dump(demo_config(tr.units), sort_keys=False),
                         encoding="utf-8")

    echo(f"[3/5] training 1 process on the Shar directory ({size.epochs} epochs)")
    echo(f"      {TABLE_HEADER}")
    single = train(yaml.safe_load(conf_path.read_text()), str(shar_dir), str(cv.data_list),
                   out_dir / "exp" / "single", num_workers=1, max_epoch=size.epochs,
                   title="1 process", on_epoch=lambda r: echo(f"      {table_row(r)}"))

    echo(f"[4/5] training 2 DDP ranks (torchrun, gloo) on the tar shards ({size.ddp_epochs} "
         "epochs)")
    ddp_dir = out_dir / "exp" / "ddp"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
           f"--master_port={_free_port()}", "-m", "wenet_lhotse.demo.train",
           "--config", str(conf_path), "--train_data", str(tr.shards_list),
           "--cv_data", str(cv.data_list), "--model_dir", str(ddp_dir),
           "--num_workers", "1", "--max_epoch", str(size.ddp_epochs), "--title", "2 DDP ranks"]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    tail: List[str] = []
    # Stream rank 0's table rows as they come; keep the rest for an error message.
    with subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True) as proc:
        for line in proc.stdout:
            if "table: " in line:
                echo("      " + line.split("table: ", 1)[1].rstrip())
            tail = (tail + [line])[-60:]
    if proc.returncode != 0:
        raise RuntimeError(f"DDP training failed (exit {proc.returncode}):\n{''.join(tail)}")
    ddp = load_history(ddp_dir / "history.json")

    runs = {"1 process": single, "2 DDP ranks": ddp}
    png = plot_history(runs, out_dir / "demo.png", title="wenet-lhotse demo")
    echo(f"[5/5] done in {time.perf_counter() - t0:.0f} s")
    for label, hist in runs.items():
        echo(f"      {label}: loss {hist[0].train_loss:.2f} -> {hist[-1].train_loss:.2f} "
             f"(cv {hist[-1].cv_loss:.2f}), "
             f"{sum(r.throughput for r in hist) / len(hist):.0f} audio s/s")
    if png:
        echo(f"      plot: {png}")
    return runs
