"""CPU of this tree's drop-in train loader against another checkout's, the two taking
turns in small chunks, so that load from elsewhere falls on both alike.

On a shared machine a whole epoch's CPU time moves with the other processes' load (2
vCPUs sharing caches and cores: 10-30% between single runs), more than the few percent a
change makes. Here one process per tree (``--old-tree DIR``: that tree alone on
``PYTHONPATH``) builds the drop-in's loader on the same generated corpus (WeNet's
aishell train ``dataset_conf``, 0 DataLoader workers) and draws its sampler's whole
epoch; then the two processes take turns, the order swapped each turn:

* **dataset**: the dataset's work (decode, features, augmentation, collation) on the
  next ``--chunk`` batches of that epoch, ``--rounds`` passes over the epoch. With
  ``--data-type shard`` the loader's own iterator (streamed: tar reading and the
  sampler run inside it) yields the next ``--chunk`` batches, so that work is counted
  too;
* **build**: building the loader again (train and cv loaders, the list read and probed,
  bucket edges) and drawing its sampler's whole epoch, twice per round (shards: the
  loaders only; their sampler's work is in the dataset turns).

Printed: each tree's CPU seconds (``time.process_time``) per part and the ratio this
tree / the other. Run: ``python bench/cpu_turns.py --old-tree DIR [--num-utts 2000]
[--rounds 2] [--speed-perturb] [--data-type raw|shard] [--corpus DIR]``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

warnings.filterwarnings("ignore")
REPO = Path(__file__).resolve().parents[1]


def child(corpus: Path, speed: bool, data_type: str) -> None:
    """Serves ``work A B`` (the dataset on batches A..B; shards: the next B - A batches of
    the loader, a new epoch when one ends) and ``build`` over stdin/stdout."""
    import logging

    import torch

    logging.disable(logging.CRITICAL)
    torch.set_num_threads(1)
    try:
        from wenet_lhotse.dropin.compat import init_dataset_and_dataloader as init
    except ImportError:  # a tree from before the drop-in moved
        from wenet_lhotse.wenet_compat import init_dataset_and_dataloader as init
    from wenet_baseline import drop_in_args, preload_langid

    from wenet_lhotse.text import CharTokenizer

    tokenizer = CharTokenizer(corpus / "units.txt")
    preload_langid()

    def build():
        args, conf = drop_in_args(corpus, data_type, 0)
        conf["speed_perturb"] = speed
        _, _, loader, _ = init(args, {"dataset_conf": conf}, tokenizer, 777)
        if data_type == "shard":  # streamed: the sampler runs inside the loader's iterator
            return loader, None
        return loader, list(loader.sampler)

    loader, items = build()
    count = sum(1 for _ in loader) if items is None else len(items)
    batches = iter(loader) if items is None else None
    print(json.dumps({"batches": count}), flush=True)
    for line in sys.stdin:
        cmd = line.split()
        gc.collect()
        t0 = time.process_time()
        if cmd[0] == "build":
            build()
        elif batches is not None:
            for _ in range(int(cmd[2]) - int(cmd[1])):
                if next(batches, None) is None:
                    batches = iter(loader)
                    next(batches)
        else:
            for item in items[int(cmd[1]):int(cmd[2])]:
                loader.dataset[item]
        print(json.dumps({"cpu": time.process_time() - t0}), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--old-tree", type=Path, help="the other checkout (required)")
    ap.add_argument("--num-utts", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--chunk", type=int, default=8, help="batches per turn")
    ap.add_argument("--corpus", type=Path, help="a corpus made by wenet_baseline.make_corpus "
                    "(default: a new one of --num-utts utterances)")
    ap.add_argument("--speed-perturb", action="store_true")
    ap.add_argument("--data-type", choices=["raw", "shard"], default="raw",
                    help="raw list, or tar shards (read and sampled as the loader's "
                         "iterator does, 0 workers)")
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(Path(args.child[0]), bool(int(args.child[1])), args.child[2])
        return
    if args.old_tree is None:
        ap.error("--old-tree is required")
    from wenet_baseline import make_corpus

    parent = "/dev/shm" if os.path.isdir("/dev/shm") else None
    with tempfile.TemporaryDirectory(dir=parent) as d:
        corpus = args.corpus or make_corpus(Path(d), args.num_utts)
        procs = []
        for tree in (REPO, args.old_tree):
            env = dict(os.environ, PYTHONPATH=str(tree), OMP_NUM_THREADS="1",
                       PYTHONWARNINGS="ignore")
            procs.append(subprocess.Popen(
                [sys.executable, __file__, "--child", str(corpus),
                 str(int(args.speed_perturb)), args.data_type], env=env, stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True))
        counts = [json.loads(p.stdout.readline())["batches"] for p in procs]

        def ask(p: subprocess.Popen, cmd: str) -> float:
            p.stdin.write(cmd + "\n")
            p.stdin.flush()
            return json.loads(p.stdout.readline())["cpu"]

        n, turn = min(counts), 0
        work, build = [0.0, 0.0], [0.0, 0.0]

        def both(cmd: str, into: list) -> None:
            nonlocal turn
            for i in ((0, 1) if turn % 2 == 0 else (1, 0)):
                into[i] += ask(procs[i], cmd)
            turn += 1

        for _ in range(args.rounds):
            for a in range(0, n, args.chunk):
                both(f"work {a} {min(a + args.chunk, n)}", work)
            both("build", build)
            both("build", build)
        for p in procs:
            p.stdin.close()
            p.wait()
    load = os.getloadavg()[0]
    print(f"{corpus} ({args.data_type}): speed perturbation {'on' if args.speed_perturb else 'off'}"
          f", batches per epoch {counts[0]} / {counts[1]}; load average {load:.1f}")
    print(f"dataset, {n} batches x {args.rounds}: {work[0]:.2f} vs {work[1]:.2f} CPU s, "
          f"{work[0] / work[1]:.3f}x")
    print(f"build + sampler epoch x {2 * args.rounds}: {build[0]:.2f} vs {build[1]:.2f} CPU s, "
          f"{build[0] / build[1]:.3f}x")


if __name__ == "__main__":
    main()
