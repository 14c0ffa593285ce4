"""The drop-in next to WeNet's own loader: figures for docs/migration.md.

On one generated corpus (``--num-utts`` utterances of 0.5-3 s, a third of the lines with
Chinese words so that langid has work to do), WeNet's own
``wenet.utils.train_utils.init_dataset_and_dataloader`` and ours are built from the same
arguments, parsed by WeNet's own ``wenet.bin.train.get_args``, and the same yaml
(WeNet's aishell ``dataset_conf`` with 20 mel bins, dither 0, static batches of 8).
One process, no DDP. Prints, per loader:

* train batches per epoch (epochs 0 and 1) and utterances per batch (min/max);
* cv: utterances, and against WeNet's, per utterance: max abs feature difference,
  targets / langs / speaker / pcm equal.

Needs WeNet's source (``$WENET_ROOT``, default ``../shared/wenet``).
Run: ``python bench/wenet_compat.py [--num-utts 200]`` (about a minute on 2 cores).
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import tempfile
from pathlib import Path

import _paths  # noqa: F401  (the repository root on sys.path: wenet_harness)
import torch
import yaml

from wenet_harness import import_wenet, wenet_missing
from wenet_harness.runs import speaker_table, write_config
from wenet_lhotse.corpus import generate_corpus
from wenet_lhotse.dropin.compat import init_dataset_and_dataloader

REPO = Path(__file__).resolve().parents[1]


def _rows(loader):
    rows, sizes = {}, []
    for b in loader:
        sizes.append(len(b["keys"]))
        for i, key in enumerate(b["keys"]):
            n, t, s = (int(b["feats_lengths"][i]), int(b["target_lengths"][i]),
                       int(b["pcm_length"][i]))
            rows[key] = (b["feats"][i, :n], b["target"][i, :t].tolist(), b["langs"][i],
                         int(b["speaker"][i]), b["pcm"][i, :s])
    return rows, sizes


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--num-utts", type=int, default=200)
    opts = p.parse_args()
    reason = wenet_missing()
    if reason:
        sys.exit(reason)
    train_mod, train_utils, init_tokenizer = import_wenet(
        "wenet.bin.train", "wenet.utils.train_utils", "wenet.utils.init_tokenizer")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        corpus = generate_corpus(root / "corpus", num_utterances=opts.num_utts,
                                 min_duration=0.5, max_duration=3.0, seed=7)
        lines = [json.loads(x) for x in corpus.data_list.read_text().splitlines()]
        for i, item in enumerate(lines):
            if i % 3 == 0:
                item["txt"] = "今天 天气 " + item["txt"]
        corpus.data_list.write_text("".join(json.dumps(x, ensure_ascii=False) + "\n"
                                            for x in lines), encoding="utf-8")
        spk = speaker_table(corpus.data_list, root / "spk.txt")
        config = write_config(root / "conf.yaml", corpus.units, spk,
                              {"fbank_conf": {"num_mel_bins": 20, "frame_shift": 10,
                                              "frame_length": 25, "dither": 0.0}})
        sys.argv = ["train.py", "--config", str(config), "--data_type", "raw",
                    "--train_data", str(corpus.data_list), "--cv_data", str(corpus.data_list),
                    "--model_dir", str(root / "exp"), "--num_workers", "1", "--prefetch", "2"]
        args = train_mod.get_args()
        configs = yaml.safe_load(config.read_text())
        tokenizer = init_tokenizer.init_tokenizer(configs)
        loaders = {
            "WeNet": train_utils.init_dataset_and_dataloader(args, copy.deepcopy(configs),
                                                             tokenizer),
            "wenet-lhotse": init_dataset_and_dataloader(args, copy.deepcopy(configs),
                                                        tokenizer),
        }
        cv = {}
        print(f"{opts.num_utts} utterances, static batches of 8, 1 process, dither 0")
        print(f"{'loader':<14}{'train batches ep0/ep1':>24}{'batch size min-max':>22}"
              f"{'cv utts':>9}")
        for name, (_, _, train_dl, cv_dl) in loaders.items():
            counts, sizes = [], []
            for _ in range(2):
                _, s = _rows(train_dl)
                counts.append(len(s))
                sizes += s
            cv[name], _ = _rows(cv_dl)
            print(f"{name:<14}{f'{counts[0]}/{counts[1]}':>24}"
                  f"{f'{min(sizes)}-{max(sizes)}':>22}{len(cv[name]):>9}")
        want, got = cv["WeNet"], cv["wenet-lhotse"]
        common = sorted(set(want) & set(got))
        diff = max(float((got[k][0] - want[k][0]).abs().max()) for k in common)
        same = {f: sum(got[k][i] == want[k][i] for k in common)
                for i, f in ((1, "targets"), (2, "langs"), (3, "speaker"))}
        pcm = sum(torch.equal(got[k][4], want[k][4]) for k in common)
        print(f"cv vs WeNet: {len(common)} common utterances; features max abs diff "
              f"{diff:.2e}; equal targets {same['targets']}, langs {same['langs']}, "
              f"speaker {same['speaker']}, pcm {pcm}")


if __name__ == "__main__":
    main()
