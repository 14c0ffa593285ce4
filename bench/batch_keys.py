"""The drop-in's batches, as keys, over several epochs: to show that a change left them as
they were (a speed change must not change what is trained, in which batch, in which order).

One generated raw-list corpus, WeNet's aishell train ``dataset_conf`` (speed perturbation
off: the keys do not depend on it), through the drop-in's train loader, for static
batches (16) and dynamic batches (``max_frames_in_batch`` 12000) x 0 and 2 DataLoader
workers: each epoch's batches as lists of keys, in the order the training loop sees
them, and one digest per set-up. ``--against DIR`` runs the same in another checkout of
this repository (``git worktree add DIR <commit>``, only ``DIR`` on ``PYTHONPATH``) and
says, set-up by set-up, whether the batches are identical; the exit status is 1 when any
differ.

Run: ``python bench/batch_keys.py [--num-utts 300] [--epochs 3] [--against DIR]``
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any, Dict, List

warnings.filterwarnings("ignore")
REPO = Path(__file__).resolve().parents[1]
SETUPS = [(kind, workers) for kind in ("static", "dynamic") for workers in (0, 2)]


def batch_conf(kind: str) -> Dict[str, Any]:
    if kind == "static":
        return {"batch_type": "static", "batch_size": 16}
    return {"batch_type": "dynamic", "max_frames_in_batch": 12000}


def child(corpus: Path, epochs: int) -> None:
    """Prints ``{setup: [epoch -> [batch -> keys]]}`` as JSON for the tree on the path."""
    import argparse as ap

    import torch

    try:
        from wenet_lhotse.dropin.compat import init_dataset_and_dataloader as init
    except ImportError:  # a tree from before the drop-in moved
        from wenet_lhotse.wenet_compat import init_dataset_and_dataloader as init
    from wenet_lhotse.text import CharTokenizer

    torch.set_num_threads(1)
    out: Dict[str, List[List[List[str]]]] = {}
    for kind, workers in SETUPS:
        conf = json.loads((corpus / "conf.json").read_text())
        conf["speed_perturb"] = False
        conf["batch_conf"] = batch_conf(kind)
        args = ap.Namespace(train_data=str(corpus / "data.list"),
                            cv_data=str(corpus / "cv" / "data.list"), data_type="raw",
                            num_workers=workers, pin_memory=False, prefetch=2)
        tokenizer = CharTokenizer(corpus / "units.txt")
        _, _, loader, _ = init(args, {"dataset_conf": conf}, tokenizer, 777)
        out[f"{kind}, {workers} workers"] = [[list(b["keys"]) for b in loader]
                                             for _ in range(epochs)]
        del loader
    print(json.dumps(out))


def run_tree(tree: Path, corpus: Path, epochs: int) -> Dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(tree), PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")
    cmd = [sys.executable, __file__, "--child", str(corpus), str(epochs)]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"{tree} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def digest(epochs: List[List[List[str]]]) -> str:
    return hashlib.sha256(json.dumps(epochs).encode()).hexdigest()[:16]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num-utts", type=int, default=300)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--against", type=Path, help="another checkout to compare with")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(Path(args.child[0]), int(args.child[1]))
        return
    from wenet_baseline import make_corpus

    parent = "/dev/shm" if os.path.isdir("/dev/shm") else None
    with tempfile.TemporaryDirectory(dir=parent) as d:
        corpus = make_corpus(Path(d), args.num_utts)
        ours = run_tree(REPO, corpus, args.epochs)
        other = run_tree(args.against, corpus, args.epochs) if args.against else None
    same = True
    for setup, epochs in ours.items():
        counts = "/".join(str(len(e)) for e in epochs)
        line = f"{setup}: batches per epoch {counts}, digest {digest(epochs)}"
        if other is not None:
            equal = other.get(setup) == epochs
            same &= equal
            line += f"; {args.against}: {digest(other[setup])}, " + (
                "identical" if equal else "DIFFERENT")
        print(line)
    sys.exit(0 if same else 1)


if __name__ == "__main__":
    main()
