"""Memory of a DataLoader worker against ``lhotse_conf.buffer_size``: streamed vs indexed.

Issue 20's goal: a worker holds metadata and the batches in flight, not the audio of its
buffer, so its RSS at ``buffer_size`` 20,000 is within 10% of the one at 2,000.

Set-up:

1. a generated corpus of ``--unique`` utterances of ``--duration`` seconds each (16 kHz
   16-bit WAV), copied under new keys (``<key>-r<copy>``, same audio and text) into
   WeNet tar shards of ``--shard-size`` until it has ``--utts`` utterances (generating
   3,000 distinct utterances would take minutes here; what a buffer holds is bytes, the
   same for a copy), indexed with ``wenet-lhotse index``'s function (``index_shards``,
   the sidecar beside the shard list);
2. per (mode, buffer_size) one **fresh process** (so that neither the main process nor
   the forked workers inherit an earlier run's heap) builds the train loader with
   ``build_dataloader`` -- WeNet's aishell ``dataset_conf`` (fbank 80, dither 0.1,
   spec_aug) without speed perturbation (it does not change what a worker buffers),
   static batches of 16, ``--workers`` DataLoader workers -- and runs one epoch; a
   thread samples every ``--interval`` seconds the RSS and USS (private memory, psutil's
   ``memory_full_info``) of each worker process and the RSS of the training process;
3. mode *streamed*: ``lhotse_conf.shard_index: false`` (each worker reads its tars and
   buckets them itself); mode *indexed*: the index beside the list (the sampler plans
   batches from metadata in the training process; workers read each batch's members by
   offset).

Printed: per run the peak RSS / USS of a worker (the largest worker), of the workers
summed, of the training process, utterances and seconds; then per mode the ratio
``buffer_size`` 20,000 over 2,000 of the worker peaks. With fewer utterances per worker
than a buffer holds, that buffer holds all of them: the printed ``per worker`` column
says how many utterances each worker's share has, so a ratio near 1 in streamed mode
with a corpus smaller than the small buffer would measure nothing.

Run: ``python bench/worker_memory.py [--utts 3000] [--duration 5] [--workers 1]``
(about 0.5 GB of tars under ``--workdir``, default a new ``/tmp`` directory).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from pathlib import Path
from typing import Dict, List

import _paths  # noqa: F401  (the repository root)
import psutil

MIB = 2**20


def replicate(corpus, out: Path, utts: int, shard_size: int) -> Path:
    """Shards of ``utts`` utterances copied from ``corpus``'s tars under new keys; returns
    the new shard list."""
    members = []  # (key, [(suffix, bytes)])
    for tar_path in Path(corpus.shards_list).read_text().split():
        with tarfile.open(tar_path) as tar:
            group: Dict[str, list] = {}
            for m in tar.getmembers():
                key, suffix = m.name.rsplit(".", 1)
                group.setdefault(key, []).append((suffix, tar.extractfile(m).read()))
            members.extend(group.items())
    out.mkdir(parents=True, exist_ok=True)
    tars = []
    for first in range(0, utts, shard_size):
        path = out / f"shards_{first // shard_size:06d}.tar"
        with tarfile.open(path, "w") as tar:
            for i in range(first, min(first + shard_size, utts)):
                key, files = members[i % len(members)]
                for suffix, data in files:
                    info = tarfile.TarInfo(f"{key}-r{i // len(members)}.{suffix}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
        tars.append(str(path))
    lst = out / "shards.list"
    lst.write_text("".join(t + "\n" for t in tars))
    return lst


def conf_for(mode: str, buffer_size: int) -> dict:
    from wenet_lhotse.cli.bench_cmd import AISHELL_DATASET_CONF

    conf = json.loads(json.dumps(AISHELL_DATASET_CONF))
    conf["speed_perturb"] = False
    conf["batch_conf"] = {"batch_type": "static", "batch_size": 16}
    conf["lhotse_conf"] = {"buffer_size": buffer_size}
    if mode == "streamed":
        conf["lhotse_conf"]["shard_index"] = False
    return conf


class Sampler(threading.Thread):
    """Peak memory of this process and of its children (the DataLoader workers), polled."""

    def __init__(self, interval: float) -> None:
        super().__init__(daemon=True)
        self.interval = interval
        self.me = psutil.Process()
        self.stop = threading.Event()
        self.worker_rss: Dict[int, int] = {}
        self.worker_uss: Dict[int, int] = {}
        self.sum_rss = self.sum_uss = self.main_rss = 0
        self.samples = 0

    def poll(self) -> None:
        rss = uss = 0
        for child in self.me.children(recursive=True):
            try:
                info = child.memory_full_info()
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            rss += info.rss
            uss += info.uss
            self.worker_rss[child.pid] = max(self.worker_rss.get(child.pid, 0), info.rss)
            self.worker_uss[child.pid] = max(self.worker_uss.get(child.pid, 0), info.uss)
        self.sum_rss = max(self.sum_rss, rss)
        self.sum_uss = max(self.sum_uss, uss)
        self.main_rss = max(self.main_rss, self.me.memory_info().rss)
        self.samples += 1

    def run(self) -> None:
        while not self.stop.is_set():
            self.poll()
            self.stop.wait(self.interval)


def child(shards: str, units: str, mode: str, buffer_size: int, workers: int,
          interval: float) -> None:
    """One run in this (fresh) process; prints one JSON line."""
    from wenet_lhotse.loader.build import build_dataloader
    from wenet_lhotse.text.tokenizer import CharTokenizer

    sampler = Sampler(interval)
    sampler.start()
    t0 = time.perf_counter()
    _, loader = build_dataloader(shards, CharTokenizer(units), conf_for(mode, buffer_size),
                                 seed=1, num_workers=workers)
    kind = type(loader).__name__
    assert kind == ("StreamedDataLoader" if mode == "streamed" else "MapDataLoader"), kind
    utts = batches = 0
    for batch in loader:
        utts += len(batch["keys"])
        batches += 1
    seconds = time.perf_counter() - t0
    sampler.poll()
    sampler.stop.set()
    sampler.join()
    print(json.dumps({
        "mode": mode, "buffer_size": buffer_size, "loader": kind, "utts": utts,
        "batches": batches, "seconds": seconds, "samples": sampler.samples,
        "workers_seen": len(sampler.worker_rss),
        "worker_rss_mib": max(sampler.worker_rss.values(), default=0) / MIB,
        "worker_uss_mib": max(sampler.worker_uss.values(), default=0) / MIB,
        "workers_rss_sum_mib": sampler.sum_rss / MIB,
        "workers_uss_sum_mib": sampler.sum_uss / MIB,
        "main_rss_mib": sampler.main_rss / MIB}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--utts", type=int, default=3000)
    ap.add_argument("--unique", type=int, default=200,
                    help="distinct generated utterances, copied up to --utts")
    ap.add_argument("--duration", type=float, default=5.0, help="seconds per utterance")
    ap.add_argument("--shard-size", type=int, default=50)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--buffers", type=int, nargs="+", default=[2000, 20000])
    ap.add_argument("--interval", type=float, default=0.1, help="seconds between samples")
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--child", nargs=4, metavar=("SHARDS", "UNITS", "MODE", "BUFFER"),
                    help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        shards, units, mode, buf = args.child
        child(shards, units, mode, int(buf), args.workers, args.interval)
        return

    from wenet_lhotse.convert.index import index_shards
    from wenet_lhotse.corpus import generate_corpus

    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="bench_worker_memory_"))
    t0 = time.perf_counter()
    corpus = generate_corpus(workdir / "corpus", num_utterances=min(args.unique, args.utts),
                             shard_size=args.shard_size, min_duration=args.duration,
                             max_duration=args.duration, seed=0)
    shards = replicate(corpus, workdir / "shards", args.utts, args.shard_size)
    generated = time.perf_counter() - t0
    summary = index_shards(str(shards), num_jobs=1)
    tars = [t for t in shards.read_text().split() if t]
    audio_mib = sum(os.path.getsize(t) for t in tars) / MIB
    head = {"machine": f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}",
            "utts": args.utts, "unique": min(args.unique, args.utts),
            "duration_s": args.duration, "tars": len(tars),
            "tar_mib": round(audio_mib, 1), "indexed_utts": summary.utterances,
            "workers": args.workers, "per_worker_utts": args.utts // max(args.workers, 1),
            "generate_s": round(generated, 1)}
    print(json.dumps(head), flush=True)
    rows: List[dict] = []
    for mode in ("streamed", "indexed"):
        for buf in args.buffers:
            cmd = [sys.executable, __file__, "--workers", str(args.workers), "--interval",
                   str(args.interval), "--child", str(shards), str(corpus.units),
                   mode, str(buf)]
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            rows.append(json.loads(out.strip().splitlines()[-1]))
            print(json.dumps(rows[-1]), flush=True)
    print(f"\n{args.utts} utterances x {args.duration:g} s ({audio_mib:.0f} MiB of tars), "
          f"{args.workers} worker(s), {head['per_worker_utts']} utterances per worker\n")
    print("| mode | buffer_size | worker peak RSS MiB | worker peak USS MiB | "
          "training process peak RSS MiB | utterances | seconds |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['mode']} | {r['buffer_size']:,} | {r['worker_rss_mib']:.0f} | "
              f"{r['worker_uss_mib']:.0f} | {r['main_rss_mib']:.0f} | {r['utts']} | "
              f"{r['seconds']:.1f} |")
    lo, hi = min(args.buffers), max(args.buffers)
    print()
    for mode in ("streamed", "indexed"):
        by = {r["buffer_size"]: r for r in rows if r["mode"] == mode}
        for what in ("worker_rss_mib", "worker_uss_mib", "main_rss_mib"):
            ratio = by[hi][what] / by[lo][what] if by[lo][what] else float("nan")
            print(f"{mode}: {what} at {hi:,} / at {lo:,} = {ratio:.3f}")
    print(f"machine after: load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
