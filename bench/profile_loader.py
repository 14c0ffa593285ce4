"""Where the drop-in's train loader spends its CPU, stage by stage.

One generated corpus (in RAM when ``/dev/shm`` exists), WeNet's aishell train
``dataset_conf`` (speed perturbation 0.9/1.0/1.1, fbank 80, dither 0.1, spec_aug,
static batch 16) through ``build_dataloader``, for a raw list and for tar shards:

* **stages** (one process, one torch thread, ``time.process_time`` around each call):
  the sampler (map mode: bucketing over metadata; shards: reading the tars and
  bucketing, as each streamed worker does), then per cut exactly the calls the features
  pipeline makes -- decode, resample (none: the corpus is 16 kHz), speed perturbation,
  dither, fbank, spec_aug -- then collation (padding features, tokenizing, sorting,
  targets: the dataset's ``__getitem__`` given the finished features);
* **transfer**: the loader's DataLoader class with the same workers handing the finished
  batches to the main process (pickling, shared memory, unpickling), CPU of the process
  tree;
* **total**: the real loader with ``--workers`` DataLoader workers, CPU of the process
  tree (psutil) over one epoch, of which "setup" is building the train and cv loaders
  (the drop-in builds both; metadata, bucket bins; the cv set is 1/25 of the train
  set; imports excluded); "other" is total minus everything
  above (Python glue, the DataLoader's loop, the main process).

All in CPU seconds per hour of audio (feature frames x 10 ms). Also printed: the first
batch (wall seconds from building the loader; CPU seconds the training process spent
building the loaders and up to the first batch: the serial start-up) and the loader's
throughput.

Run: ``python bench/profile_loader.py [--num-utts 600] [--workers 2] [--rounds 3]``
(``--rounds``: the real loader's runs per tree, alternating, medians printed; its
throughput swings by up to 2x between single runs on a busy machine).
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Dict, List

warnings.filterwarnings("ignore")
REPO = Path(__file__).resolve().parents[1]

from wenet_baseline import (  # noqa: E402
    corpus_dir,
    drop_in_args,
    make_corpus,
    preload_langid,
    tree_usage,
)

STAGES = ("sampler", "decode", "resample", "speed perturb", "dither", "fbank", "spec_aug",
          "collation")


class StageClock:
    """Accumulates ``time.process_time`` per stage name."""

    def __init__(self) -> None:
        self.cpu: Dict[str, float] = {s: 0.0 for s in STAGES}

    def run(self, stage: str, fn: Callable, *a: Any, **kw: Any) -> Any:
        t0 = time.process_time()
        out = fn(*a, **kw)
        self.cpu[stage] += time.process_time() - t0
        return out


def build(corpus: Path, data_type: str, workers: int, lconf: Dict[str, Any]):
    from wenet_lhotse.dropin.compat import init_dataset_and_dataloader
    from wenet_lhotse.text import CharTokenizer

    args, conf = drop_in_args(corpus, data_type, workers)
    if lconf:
        conf["lhotse_conf"] = lconf
    dataset, _, loader, _ = init_dataset_and_dataloader(
        args, {"dataset_conf": conf}, CharTokenizer(corpus / "units.txt"), 777)
    return dataset, loader


def sampled_batches(loader, clock: StageClock) -> List[Any]:
    """The epoch's batches of cuts, timing the sampler (and tar reading for shards)."""
    if loader.mode == "map":
        it = iter(loader.sampler)
        out = []
        while True:
            item = clock.run("sampler", next, it, None)
            if item is None:
                return out
            out.append(item[1])
    from lhotse.dataset.sampling.dynamic_bucketing import DynamicBucketingSampler

    ds = loader.dataset
    if hasattr(ds, "prepare"):
        ds.prepare()  # work deferred to the loader's first iter()

    def read():
        try:  # the sampler each streamed worker runs, where the tree has one
            from wenet_lhotse.loader.streamed import WarmStartSampler as cls
        except ImportError:
            cls = DynamicBucketingSampler
        sampler = cls(ds.cuts_for_epoch(0), world_size=1, rank=0, seed=ds.seed,
                      shuffle=ds.shuffle, **ds.sampler_kw)
        return [b for b in sampler]

    return clock.run("sampler", read)


def _code():
    """The pieces the features pipeline of the code tree under test is made of (the
    module layout changed over time; a ``decode`` method, when the pipeline has one, is
    what it decodes with)."""
    import importlib

    for strategy in ("wenet_lhotse.features.strategy", "wenet_lhotse.features.pool"):
        try:
            mod = importlib.import_module(strategy)
            return mod.PooledBatch, mod._collate, mod._collate_audio
        except (ImportError, AttributeError):
            continue
    raise ImportError("no PooledBatch/_collate in this code tree")


def profile_stages(dataset, batches, clock: StageClock) -> List[Dict[str, Any]]:
    """Run the features pipeline's calls cut by cut; returns the finished batch dicts."""
    import random

    import numpy as np
    import torch

    from wenet_lhotse.features import augment, cut_seed, kaldi
    try:
        from wenet_lhotse.features.augmentations.spec_aug import spec_aug
    except ImportError:  # older trees
        spec_aug = augment.spec_aug
    from wenet_lhotse.features.fbank import INT16_SCALE

    PooledBatch, collate_feats, collate_audio = _code()
    features = dataset.features
    p = features.pipeline
    cfg = p.extractor.config
    torch.set_num_threads(1)

    def decode(cut):
        if hasattr(p, "decode"):
            return p.decode(cut)
        audio = np.asarray(cut.load_audio(), dtype=np.float32)
        return (audio[0] if audio.ndim == 2 else audio), int(cut.sampling_rate)

    out = []
    for cuts in batches:
        feats_list, pcms = [], []
        for cut in cuts:
            seed = cut_seed(features.seed, 0, cut.id)
            samples, sr = clock.run("decode", decode, cut)
            if p.resample_to and sr != p.resample_to:
                samples = clock.run("resample", augment.resample, samples, sr, p.resample_to)
                sr = p.resample_to
            rng = random.Random(seed)
            if p.speeds:
                factor = augment.choose_speed(rng, p.speeds)
                samples = clock.run("speed perturb", augment.speed_perturb, samples, sr, factor)
            pcms.append(np.asarray(samples, dtype=np.float32))
            gen = torch.Generator().manual_seed(seed)
            wave = torch.from_numpy(np.ascontiguousarray(samples))
            dither = getattr(kaldi, "dithered", None) or kaldi._dithered  # older trees
            if "scale" in inspect.signature(dither).parameters:  # scales in the same pass
                wave = clock.run("dither", dither, wave, cfg.dither, gen, INT16_SCALE)
            else:
                wave = clock.run("dither", dither, wave * INT16_SCALE, cfg.dither, gen)
            feats = clock.run("fbank", kaldi.fbank, [wave], cfg.frame_options(sr),
                              cfg.fbank_options(0.0))[0].numpy()
            if p.spec_aug is not None:
                feats = clock.run("spec_aug", spec_aug, feats, rng, p.spec_aug)
            feats_list.append(np.ascontiguousarray(feats))

        def collate(cuts=cuts, feats_list=feats_list, pcms=pcms):
            pcm = getattr(dataset, "return_pcm", False)
            if hasattr(features, "unpadded"):  # the dataset pads the rows in batch order
                lens = torch.tensor([f.shape[0] for f in feats_list], dtype=torch.int32)
                done = PooledBatch(feats_list, lens, cuts, pcms if pcm else None)
            else:
                padded, lens = collate_feats(feats_list, features.feature_dim())
                done = PooledBatch(padded, lens, cuts, collate_audio(pcms) if pcm else None)

            class Done:  # the features object, its work already done
                def __call__(self, c, augment=True):
                    return done

                unpadded = __call__ if hasattr(features, "unpadded") else None

                def feature_dim(self):
                    return features.feature_dim()

            real = dataset.features
            dataset.features = Done()
            try:
                return dataset[cuts]
            finally:
                dataset.features = real

        out.append(clock.run("collation", collate))
    return out


def transfer_cpu(batches: List[Dict[str, Any]], workers: int) -> float:
    """CPU seconds (process tree) to hand the finished batches from DataLoader workers
    to the main process."""
    import torch

    class Ready(torch.utils.data.Dataset):
        def __len__(self):
            return len(batches)

        def __getitem__(self, i):
            return batches[i]

    before = tree_usage()["cpu"]
    try:  # our loader class: batches travel as they do in the loader (shared-memory ring)
        from wenet_lhotse.loader.dataloader import LhotseDataLoader
        from wenet_lhotse.loader.map_items import LoaderDataset

        loader = LhotseDataLoader(LoaderDataset(Ready()), sampler=range(len(batches)),
                                  num_workers=workers, persistent_workers=True)
    except ImportError:
        loader = torch.utils.data.DataLoader(Ready(), batch_size=None, num_workers=workers,
                                             persistent_workers=True)
    for _ in loader:
        pass
    # the workers' start-up (fork) is part of every loader; their idle time is not
    return tree_usage()["cpu"] - before


def total_cpu(corpus: Path, data_type: str, workers: int, lconf: Dict[str, Any]):
    import torch

    torch.set_num_threads(1)
    preload_langid()  # a start-up cost, as in bench/wenet_baseline.py
    import wenet_lhotse.dropin.compat  # noqa: F401
    import wenet_lhotse.text  # noqa: F401  (imports are not set-up work)

    before = tree_usage()
    t0 = time.perf_counter()
    _, loader = build(corpus, data_type, workers, lconf)
    setup = tree_usage()["cpu"] - before["cpu"]
    first = first_main = None
    frames = 0
    for batch in loader:
        if first is None:
            first = time.perf_counter() - t0
            first_main = tree_usage()["main"] - before["main"]
        frames += int(batch["feats_lengths"].sum())
    wall = time.perf_counter() - t0
    return {"cpu": tree_usage()["cpu"] - before["cpu"], "audio": frames / 100.0, "wall": wall,
            "first": first, "setup": setup, "first_main": first_main}


def child(corpus: Path, data_type: str, workers: int, lconf: Dict[str, Any]) -> None:
    import torch

    torch.set_num_threads(1)
    if os.environ.get("PROFILE_PART") == "total":
        print(json.dumps(total_cpu(corpus, data_type, workers, lconf)))
        return
    dataset, loader = build(corpus, data_type, 0, lconf)
    clock = StageClock()
    batches = sampled_batches(loader, clock)
    done = profile_stages(dataset, batches, clock)
    audio = sum(float(b["feats_lengths"].sum()) for b in done) / 100.0
    transfer = transfer_cpu(done, workers)
    print(json.dumps({"stages": clock.cpu, "transfer": transfer, "audio": audio}))


def run(corpus: Path, data_type: str, workers: int, lconf: Dict[str, Any], part: str,
        code: Path = REPO):
    import subprocess

    env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1", PROFILE_PART=part)
    env["PYTHONPATH"] = str(code)  # that tree only, run by its own copy of this script
    script = code / "bench" / "profile_loader.py"
    out = subprocess.run([sys.executable, str(script), "--child", str(corpus), data_type,
                          str(workers), json.dumps(lconf)], capture_output=True, text=True,
                         env=env)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-3000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--num-utts", type=int, default=600)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--types", nargs="+", default=["raw", "shard"], choices=["raw", "shard"])
    ap.add_argument("--lhotse-conf", default="{}", help="JSON lhotse_conf for the loader")
    ap.add_argument("--rounds", type=int, default=1,
                    help="runs of the real loader per tree (alternating; medians)")
    ap.add_argument("--before", type=Path, default=None,
                    help="another checkout's root (e.g. `git worktree add /tmp/b <commit>`): "
                         "profiled alternately with this one, columns side by side")
    ap.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        corpus, data_type, workers, lconf = args.child
        child(Path(corpus), data_type, int(workers), json.loads(lconf))
        return
    lconf = json.loads(args.lhotse_conf)
    trees = ([("before", args.before.resolve())] if args.before else []) + [("after", REPO)]
    if not args.before:
        trees = [("this tree", REPO)]
    with corpus_dir() as (root, where):
        corpus = make_corpus(root, args.num_utts)
        print(f"corpus: {args.num_utts} utterances (1-15 s, in {where}; cv: "
              f"{max(8, args.num_utts // 25)}), WeNet aishell train conf "
              f"(speed perturb, fbank 80, dither 0.1, spec_aug, static batch 16); "
              f"{args.workers} DataLoader workers; {os.cpu_count()} CPUs, load average "
              f"{os.getloadavg()[0]:.1f}; lhotse_conf {lconf or '{}'}; real loader: "
              f"median of {args.rounds} run(s) per tree; "
              + ", ".join(f"{label}: {code}" for label, code in trees))
        res: Dict[tuple, tuple] = {}
        for data_type in args.types:  # stages and totals of the trees alternate
            for label, code in trees:
                res.setdefault((data_type, label), {})["stages"] = run(
                    corpus, data_type, args.workers, lconf, "stages", code)
            totals: Dict[str, List[Dict[str, float]]] = {label: [] for label, _ in trees}
            for r in range(args.rounds):  # the order flips every round
                for label, code in trees if r % 2 == 0 else trees[::-1]:
                    totals[label].append(run(corpus, data_type, args.workers, lconf,
                                             "total", code))
            for label, runs in totals.items():  # the median of each figure
                res[(data_type, label)]["total"] = {
                    k: statistics.median(t[k] for t in runs) for k in runs[0]}
        cols = [(t, label) for t in args.types for label, _ in trees]
        print()
        print("| stage (CPU s / audio h) | " + " | ".join(f"{t}, {label}" for t, label in cols)
              + " |")
        print("|---|" + "---|" * len(cols))
        rows: Dict[str, List[str]] = {}
        for key in cols:
            st, tot = res[key]["stages"], res[key]["total"]
            per_h = 3600.0 / st["audio"]
            total = tot["cpu"] / (tot["audio"] / 3600.0)
            vals = {k: v * per_h for k, v in st["stages"].items()}
            vals["transfer (workers -> main)"] = st["transfer"] * per_h
            vals["setup (train + cv loaders: metadata, bins)"] = tot["setup"] / (
                tot["audio"] / 3600.0)
            vals["other (glue, loop, main process)"] = total - sum(vals.values())
            vals["**total**"] = total
            for k, v in vals.items():
                rows.setdefault(k, []).append(f"{v:.2f} ({100 * v / total:.0f}%)")
        for k, cells in rows.items():
            print(f"| {k} | " + " | ".join(cells) + " |")
        print()
        for key in cols:
            tot = res[key]["total"]
            print(f"{key[0]}, {key[1]}: {tot['audio'] / tot['wall']:,.0f} x real time, first "
                  f"batch {tot['first']:.2f} s (training process: {tot['setup']:.2f} CPU s "
                  f"building the loaders, {tot['first_main']:.2f} CPU s to the first batch), "
                  f"{tot['audio'] / 3600:.2f} h of features")
        if args.before:
            for t in args.types:
                b, a = res[(t, "before")]["total"], res[(t, "after")]["total"]
                cb, ca = b["cpu"] / b["audio"], a["cpu"] / a["audio"]
                print(f"{t}: after / before: CPU per audio hour {ca / cb:.2f}x, throughput "
                      f"{(a['audio'] / a['wall']) / (b['audio'] / b['wall']):.2f}x")


if __name__ == "__main__":
    main()
