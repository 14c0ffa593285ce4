"""What ``lhotse_conf.index_first_pass`` costs and saves: a streamed epoch 0 that records
the index vs one that does not, side by side in one run, and the two ways to get the
index (writing it from the first epoch's fragments vs a separate ``wenet-lhotse index``).

Set-up: a generated corpus (``--utts`` utterances of 1-6 s, 16 kHz 16-bit WAV) as WeNet
shards of 20 (local files, in the page cache after the first round); one process
(``num_workers=0``), static batches of 8, seed 5.

1. one streamed epoch 0 through ``build_dataloader``, without and with
   ``index_first_pass`` (fragments removed before each round), alternated ``--rounds``
   times, two datasets: keys only (no decoding: the recording's share at its largest)
   and WeNet's default (fbank features): the best CPU seconds of each (this process's
   ``time.process_time``: everything runs in it, and CPU time stays comparable on a
   shared machine where wall time does not) and their ratio;
2. the shard reader alone over every tar (what the recording adds to, without the
   sampler, dataset and features), without and with recording, alternated: best CPU
   seconds, ratio, and the difference per utterance;
3. writing the index from the fragments (``FirstPass.assemble``: what happens at the
   start of epoch 1) vs ``index_shards`` (``wenet-lhotse index``, one process; every
   tar read again): best CPU seconds of each.

Run: ``python bench/first_pass.py [--utts 600] [--rounds 3]``.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import _paths  # noqa: F401  (the repository root)

from wenet_lhotse import build_dataloader
from wenet_lhotse.convert.index import index_shards
from wenet_lhotse.corpus import generate_corpus
from wenet_lhotse.formats import read_shard_list
from wenet_lhotse.formats.index_fragments import FRAGMENTS, FirstPass
from wenet_lhotse.io.policy import ReadPolicy
from wenet_lhotse.text import CharTokenizer


class _Keys:
    def __getitem__(self, cuts):
        return {"keys": [c.id for c in cuts]}


def _epoch0(lst: str, units: str, record: bool, keys_only: bool) -> float:
    conf = {"batch_conf": {"batch_type": "static", "batch_size": 8},
            "lhotse_conf": {"index_first_pass": record, "progress_every": 0}}
    ds = _Keys() if keys_only else None
    t0 = time.process_time()
    _, loader = build_dataloader(lst, CharTokenizer(units), conf, "train", dataset=ds,
                                 seed=5)
    n = sum(1 for _ in loader)
    assert n > 0
    return time.process_time() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--utts", type=int, default=600)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        corpus = generate_corpus(root / "c", num_utterances=args.utts, min_duration=1.0,
                                 max_duration=6.0, seed=0, shard_size=20)
        lst = str(corpus.shards_list)
        frags = Path(lst + ".index" + FRAGMENTS)
        times = {(k, r): [] for k in (True, False) for r in (False, True)}
        for _ in range(args.rounds):
            for keys_only in (True, False):
                for record in (False, True):
                    shutil.rmtree(frags, ignore_errors=True)
                    times[keys_only, record].append(
                        _epoch0(lst, str(corpus.units), record, keys_only))
        assert frags.is_dir()  # the last round recorded every tar
        policy = ReadPolicy()
        read = {False: [], True: []}  # the reader alone: the recording's own cost
        for _ in range(args.rounds):
            for record in (False, True):
                t0 = time.process_time()
                cuts = (FirstPass(str(root / "frag")).open(lst, policy=policy) if record
                        else read_shard_list(lst, policy=policy))
                assert sum(1 for _ in cuts) == args.utts
                read[record].append(time.process_time() - t0)
        kept = root / "fragments"
        shutil.copytree(frags, kept)
        assemble, separate = [], []
        for _ in range(args.rounds):
            shutil.rmtree(frags, ignore_errors=True)
            shutil.copytree(kept, frags)
            t0 = time.process_time()
            FirstPass().assemble(lst, ReadPolicy())
            assemble.append(time.process_time() - t0)
            t0 = time.process_time()
            index_shards(lst, out=str(root / "separate.index"), full=True)
            separate.append(time.process_time() - t0)
        same = Path(lst + ".index").read_bytes() == (root / "separate.index").read_bytes()
    tars = -(-args.utts // 20)
    print(f"corpus: {args.utts} utterances of 1-6 s in {tars} tars; best of {args.rounds}")
    off, on = min(read[False]), min(read[True])
    print(f"the shard reader alone, every tar: {off:.3f} CPU s without recording, {on:.3f} "
          f"with, ratio {on / off:.3f} ({(on - off) / args.utts * 1e3:.3f} ms per utterance)")
    for keys_only, name in ((True, "keys only"), (False, "fbank (WeNet's dataset)")):
        off, on = min(times[keys_only, False]), min(times[keys_only, True])
        print(f"streamed epoch 0, {name}: {off:.2f} CPU s without recording, {on:.2f} with, "
              f"ratio {on / off:.3f}")
    print(f"the index from the fragments: {min(assemble):.3f} CPU s; wenet-lhotse index "
          f"(every tar read again, 1 process): {min(separate):.3f} CPU s; same bytes: {same}")


if __name__ == "__main__":
    main()
