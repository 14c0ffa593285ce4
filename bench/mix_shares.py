"""Source shares among batches: mixing by cut (CutSet.mux before one bucketing sampler)
vs mixing by batch (the source drawn per batch), on a corpus smaller than the buffer.

Two cuts manifests of 300 utterances each (renamed copies of a generated 20-utterance
corpus: metadata only, nothing decoded), weights 3:1, WeNet's ``shuffle_size`` 10,000 as
the buffer (librispeech's yaml), static batches of 8, 30 buckets. For each of
``--seeds`` seeds, ``build_dataloader`` draws one epoch; printed: the weighted source's
share of the batches in the first 10 / 25 / 50 batches and over the whole epoch, mean
and range over the seeds.

Run: ``python bench/mix_shares.py [--seeds 10]`` (about a minute on 2 cores).
"""

from __future__ import annotations

import argparse
import tempfile
from collections import Counter
from pathlib import Path

from lhotse import CutSet
from lhotse.utils import fastcopy

from wenet_lhotse import CharTokenizer, build_dataloader, generate_corpus, read_wenet_list


class Lang:
    def __getitem__(self, cuts):
        return Counter(c.custom["lang"] for c in cuts).most_common(1)[0][0]


def shares(root: Path, mix_by: str, seed: int, tok) -> dict:
    conf = {"batch_conf": {"batch_type": "static", "batch_size": 8},
            "shuffle_conf": {"shuffle_size": 10000},
            "lhotse_conf": {"num_buckets": 30, "mix_by": mix_by}}
    sources = [{"path": str(root / "a.jsonl.gz"), "weight": 3, "tags": {"lang": "a"}},
               {"path": str(root / "b.jsonl.gz"), "weight": 1, "tags": {"lang": "b"}}]
    langs = list(build_dataloader(sources, tok, conf, "train", seed=seed, dataset=Lang())[1])
    out = {f"first {n}": langs[:n].count("a") / n for n in (10, 25, 50)}
    out["epoch"] = langs.count("a") / len(langs)
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--seeds", type=int, default=10)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        corpus = generate_corpus(root / "c", num_utterances=20, min_duration=1.0,
                                 max_duration=6.0, seed=4)
        cuts = list(read_wenet_list(corpus.data_list))
        for name in ("a", "b"):
            CutSet.from_cuts(fastcopy(c, id=f"{name}-{i}") for i, c in
                             enumerate(cuts * 15)).to_file(root / f"{name}.jsonl.gz")
        tok = CharTokenizer(corpus.units)
        for mix_by in ("cut", "batch"):
            runs = [shares(root, mix_by, s, tok) for s in range(args.seeds)]
            cols = []
            for k in runs[0]:
                v = [r[k] for r in runs]
                cols.append(f"{k}: {sum(v) / len(v):.2f} ({min(v):.2f}-{max(v):.2f})")
            print(f"mix_by {mix_by:5s} share of the 3:1 source: " + ", ".join(cols))


if __name__ == "__main__":
    main()
