"""How many of an epoch's batches repeat a batch of the previous epoch, per loading mode,
next to WeNet's own loader on the same corpus and ``dataset_conf``.

A batch *repeats* when its set of utterance keys equals the key set of some batch of
the previous epoch. Shuffling that keeps the same batch neighbours every epoch weakens
training (issue 28 measured 12-15 % in map and indexed mode); WeNet's loader, whose
sample shuffle buffer reorders utterances before its sort buffer and batcher, repeats
almost none.

Set-up: ``generate_corpus`` (``--num-utts`` utterances of 0.5-4 s, seed 5; WeNet tar
shards of 20), WeNet's train ``dataset_conf`` as in ``wenet_harness.runs``
(``shuffle_size`` 1500, ``sort_size`` 500, static batches of ``--batch-size``), one
process, ``--world-size`` ranks simulated in it (each rank's batches counted apart),
``--workers`` DataLoader workers. Modes (ours through ``build_dataloader``; the dataset
returns the keys, so only the loader runs):

* ``map raw list``: the raw ``data.list``;
* ``indexed shards``: the shard list with its index (``wenet-lhotse index``);
* ``streamed shards``: the same tars listed without an index;
* ``mux 2 lists``: the raw list in two halves, two sources mixed by cut;
* ``mix_by batch``: the two halves mixed by batch (``lhotse_conf.mix_by: batch``);
* ``WeNet``: ``wenet.dataset.dataset.Dataset`` from ``$WENET_ROOT`` on the raw list,
  iterated twice (``apply_sharding`` per rank; features computed, as WeNet always does).

Run: ``python bench/batch_repetition.py [--num-utts 300] [--epochs 3]``. Prints, per mode,
the repeated share over the epoch transitions (repeats / batches) and the batch count.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any, Dict, List, Sequence

import _paths  # noqa: F401  (the repository root on sys.path: wenet_harness)

warnings.filterwarnings("ignore")


def repeated(prev: Sequence[Sequence[str]], cur: Sequence[Sequence[str]]) -> int:
    """Batches of ``cur`` whose key set equals that of a batch of ``prev``."""
    seen = {frozenset(b) for b in prev}
    return sum(frozenset(b) in seen for b in cur)


def repetition(epochs: Sequence[Sequence[Sequence[str]]]) -> tuple:
    """(repeats, batches) over every transition epoch e -> e + 1."""
    reps = sum(repeated(a, b) for a, b in zip(epochs, epochs[1:]))
    return reps, sum(len(b) for b in epochs[1:])


class Keys:
    """A map-style dataset returning WeNet's ``keys`` field only."""

    def __getitem__(self, cuts: Any) -> Dict[str, List[str]]:
        return {"keys": [c.id for c in cuts]}


def dataset_conf(batch_size: int) -> Dict[str, Any]:
    from wenet_harness.runs import TINY_DATASET_CONF

    conf = json.loads(json.dumps(TINY_DATASET_CONF))
    conf["batch_conf"] = {"batch_type": "static", "batch_size": batch_size}
    conf["spec_aug"] = False
    return conf


def make_corpus(root: Path, n: int) -> Dict[str, Any]:
    from wenet_lhotse.convert.index import index_input
    from wenet_lhotse.corpus import generate_corpus

    c = generate_corpus(root / "c", num_utterances=n, min_duration=0.5, max_duration=4.0,
                        shard_size=20, seed=5)
    lines = c.data_list.read_text().splitlines(keepends=True)
    halves = [root / "a.list", root / "b.list"]
    halves[0].write_text("".join(lines[: n // 2]))
    halves[1].write_text("".join(lines[n // 2:]))
    streamed = root / "streamed.list"
    shutil.copy(c.shards_list, streamed)
    index_input(str(c.shards_list))
    return {"corpus": c, "raw": c.data_list, "indexed": c.shards_list, "streamed": streamed,
            "halves": halves}


def ours(sources: Any, conf: Dict[str, Any], tok: Any, epochs: int, world: int,
         workers: int) -> List[List[List[List[str]]]]:
    """Per rank, per epoch, the key lists of the batches."""
    from wenet_lhotse import build_dataloader

    out = []
    for rank in range(world):
        _, loader = build_dataloader(sources, tok, conf, "train", dataset=Keys(), seed=7,
                                     world_size=world, rank=rank, num_workers=workers)
        out.append([[b["keys"] for b in loader] for _ in range(epochs)])
    return out


def wenet(corpus: Any, conf: Dict[str, Any], epochs: int, world: int
          ) -> List[List[List[List[str]]]]:
    from torch.utils.data.graph_settings import apply_sharding

    from wenet_harness import import_wenet, wenet_char_tokenizer
    from wenet_harness.runs import speaker_table

    (dataset_mod,) = import_wenet("wenet.dataset.dataset")
    conf = {**conf, "speaker_conf": {"speaker_table_path": str(
        speaker_table(corpus.data_list, corpus.root / "spk.txt"))}}
    tok = wenet_char_tokenizer(corpus.units)
    out = []
    for rank in range(world):
        ds = dataset_mod.Dataset("raw", str(corpus.data_list), tok, conf, partition=True)
        if world > 1:
            apply_sharding(ds, world, rank)
        out.append([[list(b["keys"]) for b in ds] for _ in range(epochs)])
    return out


def main(argv: Sequence[str] = ()) -> Dict[str, tuple]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--num-utts", type=int, default=300)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--world-size", type=int, default=1)
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--no-wenet", action="store_true", help="leave WeNet's row out")
    ap.add_argument("--modes", default="", help="comma-separated row names to run "
                    "(default: all), e.g. 'map raw list,indexed shards'")
    args = ap.parse_args(list(argv) or None)

    from wenet_lhotse.text import CharTokenizer

    root = Path(tempfile.mkdtemp(prefix="batch_rep_"))
    try:
        data = make_corpus(root, args.num_utts)
        tok = CharTokenizer(data["corpus"].units)
        conf = dataset_conf(args.batch_size)
        mixed = {**conf, "lhotse_conf": {"mix_by": "batch"}}
        runs = {
            "map raw list": (str(data["raw"]), conf),
            "indexed shards": (str(data["indexed"]), conf),
            "streamed shards": (str(data["streamed"]), conf),
            "mux 2 lists": ([str(p) for p in data["halves"]], conf),
            "mix_by batch": ([str(p) for p in data["halves"]], mixed),
        }
        results: Dict[str, tuple] = {}
        print(f"{args.num_utts} utterances, static batches of {args.batch_size}, "
              f"{args.world_size} rank(s), {args.workers} worker(s), {args.epochs} epochs")
        wanted = [m for m in args.modes.split(",") if m]
        for name, (src, c) in runs.items():
            if wanted and name not in wanted:
                continue
            per_rank = ours(src, c, tok, args.epochs, args.world_size, args.workers)
            results[name] = _report(name, per_rank)
        if not args.no_wenet:
            try:
                per_rank = wenet(data["corpus"], conf, args.epochs, args.world_size)
                results["WeNet"] = _report("WeNet (its own loader)", per_rank)
            except Exception as err:  # WeNet's source absent: say so, keep our rows
                print(f"WeNet: skipped ({type(err).__name__}: {err})")
        return results
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _report(name: str, per_rank: List[List[List[List[str]]]]) -> tuple:
    reps = total = 0
    for epochs in per_rank:
        r, t = repetition(epochs)
        reps, total = reps + r, total + t
    share = reps / max(total, 1)
    steps = [len(e) for e in per_rank[0]]
    print(f"  {name:24s} {reps:4d} of {total:4d} batches repeat ({share:6.1%}); "
          f"steps per epoch (rank 0): {steps}")
    return reps, total


if __name__ == "__main__":
    main()
