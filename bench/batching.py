"""Batching and resume figures for docs/performance.md.

1. Steps per epoch on a real generated corpus: WeNet's own ``wenet.dataset.dataset.Dataset``
   (from ``$WENET_ROOT``, through wenet_harness) vs our ``build_dataloader`` on the
   same raw list and ``dataset_conf``: ``static`` (batch 16), ``dynamic``
   (``max_frames_in_batch`` 4000, speed perturbation on) and ``bucket``, one process and
   2 ranks (WeNet: its sharding for rank r of 2; ours: ``world_size=2, rank=r``). For
   ``dynamic`` the largest ``batch x longest`` in frames of the real feature batches.
2. Padding on 20,000 utterances (metadata only; durations from the corpus generator's
   realistic, AISHELL-like distribution): WeNet's own batching datapipes (``shuffle``
   buffer 1500 -> its ``sort`` buffer 500 -> ``batch(16)`` / ``DynamicBatchWindow``) on
   the utterances' frame counts vs ours through ``build_dataloader`` on a cuts manifest:
   the default (WeNet's numbers: 16 utterances per batch, 30 buckets) and the opt-in
   ``lhotse_conf.batch_by: duration`` with ``max_duration`` bisected so that the mean
   padded frames per batch equal WeNet's.
3. Restore at 90% of an epoch, in a fresh loader, timed from building the loader to
   holding the next batch: ours (snapshot of the bucket buffer) vs Lhotse 1.33's
   ``load_state_dict`` (replays the epoch), for a cuts manifest and for a Shar
   directory with real FLAC audio. Both get the same ``duration_bins`` (no estimate),
   the default 20,000-cut buffer, ours ``max_frames_in_batch`` 12000 and Lhotse 120 s;
   each checks that the restored sampler continues with exactly the batch that followed;
   best of 3.

Run: ``WENET_ROOT=../shared/wenet python bench/batching.py [--real-cuts 300]
[--num-cuts 20000] [--restore-cuts 100000] [--shar-cuts 2000]`` (about 6 minutes on 2
cores). Without WeNet's source, sections 1 and 2 say so and are skipped.
"""

from __future__ import annotations

import argparse
import copy
import logging
import math
import tempfile
import time
import warnings
from pathlib import Path

import _paths  # noqa: F401  (the repository root on sys.path: wenet_harness)
import numpy as np
from lhotse import CutSet, Recording
from lhotse.audio import AudioSource
from lhotse.dataset.sampling.dynamic_bucketing import DynamicBucketingSampler

from wenet_harness import import_wenet, wenet_char_tokenizer, wenet_missing
from wenet_harness.runs import speaker_table
from wenet_lhotse.corpus import _sample_duration, generate_corpus
from wenet_lhotse.formats import read_raw_list
from wenet_lhotse.loader.bins import estimate_bins
from wenet_lhotse.loader.build import build_dataloader, make_wenet_dataset
from wenet_lhotse.text import CharTokenizer

REPO = Path(__file__).resolve().parents[1]

SR = 16000
REPEATS = 3  # restore timings: best of 3 fresh restores each (the machine is shared)
warnings.filterwarnings("ignore")
logging.disable(logging.WARNING)


def frames(num_samples: int) -> int:
    """WeNet fbank frames (25 ms window, 10 ms shift, snip_edges=True)."""
    return 1 + (num_samples - 400) // 160 if num_samples >= 400 else 0


def metadata_cuts(n: int, seed: int = 0) -> CutSet:
    rng = np.random.default_rng(seed)
    cuts = []
    for i in range(n):
        dur = _sample_duration(rng, "realistic", 1.0, 20.0)
        ns = int(round(dur * SR))
        rec = Recording(id=f"u{i:07d}", sources=[AudioSource("file", [0], f"/absent/u{i}.wav")],
                        sampling_rate=SR, num_samples=ns, duration=ns / SR)
        cuts.append(rec.to_cut())
    return CutSet.from_cuts(cuts)


def padding_stats(batches):
    """(padding fraction, mean padded frames per batch, batches, largest padded batch)
    for batches given as lists of frame counts."""
    real = sum(sum(b) for b in batches)
    padded = [len(b) * max(b) for b in batches]
    return 1 - real / sum(padded), sum(padded) / len(batches), len(batches), max(padded)


def wenet_batches(lengths, batch_conf, shuffle_size=1500, sort_size=500):
    """WeNet's own datapipes (its ``processor``/``datapipes`` from $WENET_ROOT) on items
    whose ``feat`` has ``lengths[i]`` frames: shuffle -> sort -> WeNet's batching."""
    import torch
    from torch.utils.data.datapipes.iter import IterableWrapper

    datapipes, processor = import_wenet("wenet.dataset.datapipes", "wenet.dataset.processor")
    torch.manual_seed(0)
    items = [{"key": str(i), "feat": torch.empty(n, 0)} for i, n in enumerate(lengths)]
    dp = IterableWrapper(items).shuffle(buffer_size=shuffle_size).sort(
        buffer_size=sort_size, key_func=processor.sort_by_feats)
    btype = batch_conf["batch_type"]
    if btype == "static":
        dp = dp.batch(batch_conf["batch_size"], wrapper_class=list)
    elif btype == "dynamic":
        dp = datapipes.DynamicBatchDataPipe(
            dp, processor.DynamicBatchWindow(batch_conf["max_frames_in_batch"]),
            wrapper_class=list)
    else:
        dp = dp.bucket_by_sequence_length(processor.feats_length_fn,
                                          batch_conf["bucket_boundaries"],
                                          batch_conf["bucket_batch_sizes"], wrapper_class=list)
    return [[x["feat"].shape[0] for x in b] for b in dp]


def our_batches(manifest, lengths_by_id, conf):
    _, loader = build_dataloader(str(manifest), None, conf, "train", dataset=Ids(), seed=0)
    return [[lengths_by_id[k] for k in b] for b in loader]


def padding_section(n: int, workdir: Path) -> None:
    cuts = metadata_cuts(n)
    manifest = workdir / "padding.jsonl.gz"
    cuts.to_file(manifest)
    by_id = {c.id: frames(c.num_samples) for c in cuts}
    lengths = [by_id[c.id] for c in cuts]
    print(f"corpus: {n} cuts, {sum(c.duration for c in cuts) / 3600:.1f} h, "
          f"mean {np.mean([c.duration for c in cuts]):.2f} s (metadata)")

    def row(name, stats):
        print(f"| {name} | {100 * stats[0]:.2f} | {stats[2]:,} | {stats[1]:,.0f} | "
              f"{stats[3]:,} |")

    print("| batching | padding (% of frames) | batches / epoch | mean padded frames / batch "
          "| largest padded batch (frames) |")
    print("|---|---|---|---|---|")
    static = {"batch_type": "static", "batch_size": 16}
    wenet = padding_stats(wenet_batches(lengths, static))
    row("WeNet static 16 (shuffle 1500, sort 500)", wenet)
    base = {"batch_conf": static, "lhotse_conf": {"num_buckets": 30}}
    row("ours static 16, 30 buckets (default)", padding_stats(our_batches(manifest, by_id, base)))
    lo, hi = 10.0, 400.0  # seconds; bisect to WeNet's mean padded frames per batch
    for _ in range(12):
        mid = (lo + hi) / 2
        conf = {**base, "lhotse_conf": {"num_buckets": 30, "max_duration": mid}}
        stats = padding_stats(our_batches(manifest, by_id, conf))
        lo, hi = (mid, hi) if stats[1] < wenet[1] else (lo, mid)
    conf = {**base, "lhotse_conf": {"num_buckets": 30, "max_duration": (lo + hi) / 2}}
    row(f"ours batch_by: duration, max_duration {(lo + hi) / 2:.1f} s (opt-in)",
        padding_stats(our_batches(manifest, by_id, conf)))
    dynamic = {"batch_type": "dynamic", "max_frames_in_batch": 12000}
    row("WeNet dynamic 12000 (shuffle 1500, sort 500)",
        padding_stats(wenet_batches(lengths, dynamic)))
    row("ours dynamic 12000, 30 buckets (default)",
        padding_stats(our_batches(manifest, by_id, {**base, "batch_conf": dynamic})))
    conf = {**base, "batch_conf": dynamic, "lhotse_conf": {"num_buckets": 30,
                                                          "batch_by": "duration"}}
    row("ours dynamic 12000 as 120 s, batch_by: duration (opt-in)",
        padding_stats(our_batches(manifest, by_id, conf)))


BUCKET = {"batch_type": "bucket", "bucket_boundaries": [300, 500, 700],
          "bucket_batch_sizes": [24, 14, 10, 6]}


def steps_section(n: int, workdir: Path) -> None:
    """WeNet's own Dataset vs our loader on one real corpus (see the module docstring)."""
    from torch.utils.data.graph_settings import apply_sharding

    corpus = generate_corpus(workdir / "real", num_utterances=n, min_duration=1.0,
                             max_duration=9.0, duration_dist="realistic", seed=7)
    spk = speaker_table(corpus.data_list, workdir / "spk.txt")
    (dataset_mod,) = import_wenet("wenet.dataset.dataset")
    wenet_tok = wenet_char_tokenizer(corpus.units)
    tok = CharTokenizer(corpus.units)
    base = {"fbank_conf": {"num_mel_bins": 80, "frame_length": 25, "frame_shift": 10,
                           "dither": 0.1},
            "spec_aug": False, "shuffle": True, "shuffle_conf": {"shuffle_size": 1500},
            "sort": True, "sort_conf": {"sort_size": 500},
            "speaker_conf": {"speaker_table_path": str(spk)}}
    confs = {"static, batch_size 16": {"batch_conf": {"batch_type": "static",
                                                      "batch_size": 16}},
             "dynamic, max_frames_in_batch 4000, speed_perturb": {
                 "speed_perturb": True,
                 "batch_conf": {"batch_type": "dynamic", "max_frames_in_batch": 4000}},
             f"bucket {BUCKET['bucket_boundaries']} / {BUCKET['bucket_batch_sizes']}": {
                 "batch_conf": BUCKET}}
    print(f"corpus: {n} utterances, {corpus.total_duration / 60:.1f} min (generated, "
          f"realistic durations 1-9 s)")
    print("| batch_conf | world | WeNet steps / epoch (per rank) | ours | ours / WeNet "
          "| largest batch x longest (frames): WeNet, ours |")
    print("|---|---|---|---|---|---|")
    for name, extra in confs.items():
        conf = {**base, **extra}
        for world in (1, 2):
            w_steps, o_steps, w_max, o_max = [], [], 0, 0
            for rank in range(world):
                ds = dataset_mod.Dataset("raw", str(corpus.data_list), wenet_tok, conf,
                                         partition=True)
                if world > 1:
                    apply_sharding(ds, world, rank)
                wb = list(ds)
                w_steps.append(len(wb))
                w_max = max([w_max] + [b["feats"].shape[0] * b["feats"].shape[1] for b in wb])
                real = world == 1 and "dynamic" in name  # the cap, on real feature batches
                dataset = make_wenet_dataset(tok, conf, "train", seed=1) if real else Ids()
                _, loader = build_dataloader(str(corpus.data_list), tok, conf, "train",
                                             dataset=dataset, seed=1, world_size=world,
                                             rank=rank)
                ob = list(loader)
                o_steps.append(len(ob))
                if real:
                    o_max = max(b["feats"].shape[0] * b["feats"].shape[1] for b in ob)
            ratio = sum(o_steps) / sum(w_steps)
            sizes = f"{w_max:,}, {o_max:,}" if o_max else "-"
            print(f"| {name} | {world} | {'/'.join(map(str, w_steps))} | "
                  f"{'/'.join(map(str, o_steps))} | {ratio:.3f} | {sizes} |")
    print(f"(ceil(N / world / 16) = {math.ceil(n / 16)} / {math.ceil(n / 2 / 16)})")


class Ids:
    def __getitem__(self, cuts):
        return [c.id for c in cuts]


CONF = {"batch_conf": {"batch_type": "dynamic", "max_frames_in_batch": 12000},
        "lhotse_conf": {"num_buckets": 30}}


def restore_ours(source, bins, consumed_fraction=0.9):
    conf = {**CONF, "lhotse_conf": {**CONF["lhotse_conf"], "duration_bins": bins}}
    _, loader = build_dataloader(source, None, conf, "train", dataset=Ids(), seed=1)
    total = sum(1 for _ in loader)
    _, loader = build_dataloader(source, None, conf, "train", dataset=Ids(), seed=1)
    it = iter(loader)
    k = int(total * consumed_fraction)
    for _ in range(k):
        next(it)
    sd = loader.state_dict()
    expected = next(it)
    times = []
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        _, fresh = build_dataloader(source, None, conf, "train", dataset=Ids(), seed=1)
        fresh.load_state_dict(sd)
        got = next(iter(fresh))
        times.append(time.perf_counter() - t0)
        assert got == expected, "restored loader did not continue with the next batch"
    return min(times), k, total


def restore_lhotse(make_cuts, bins, consumed_fraction=0.9):
    kw = dict(max_duration=120.0, duration_bins=bins, shuffle=True, seed=1, buffer_size=20000)
    sampler = DynamicBucketingSampler(make_cuts(), **kw)
    total = sum(1 for _ in sampler)
    sampler = DynamicBucketingSampler(make_cuts(), **kw)
    it = iter(sampler)
    k = int(total * consumed_fraction)
    for _ in range(k):
        next(it)
    sd = sampler.state_dict()
    expected = [c.id for c in next(it)]
    times = []
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        fresh = DynamicBucketingSampler(make_cuts(), **kw)
        fresh.load_state_dict(copy.deepcopy(sd))  # Lhotse consumes its argument
        got = [c.id for c in next(iter(fresh))]
        times.append(time.perf_counter() - t0)
        assert got == expected
    return min(times), k, total


def restore_section(n: int, shar_cuts: int, workdir: Path) -> None:
    manifest = workdir / "cuts.jsonl.gz"
    metadata_cuts(n, seed=1).to_file(manifest)
    bins = estimate_bins(list(CutSet.from_file(manifest).subset(first=5000)), 30)
    ours, k, total = restore_ours(str(manifest), bins)
    theirs, k2, total2 = restore_lhotse(lambda: CutSet.from_jsonl_lazy(manifest), bins)
    print(f"restore at 90% (batch {k}/{total}), cuts manifest of {n} cuts: ours {ours:.3f} s, "
          f"Lhotse replay {theirs:.3f} s (batch {k2}/{total2}) -> {theirs / ours:.1f}x faster")

    corpus = generate_corpus(workdir / "corpus", num_utterances=shar_cuts, min_duration=1.0,
                             max_duration=15.0, duration_dist="realistic", seed=5)
    cuts = CutSet.from_cuts(list(read_raw_list(corpus.data_list)))
    shar = workdir / "shar"
    shar.mkdir()
    cuts.to_shar(shar, fields={"recording": "flac"}, shard_size=200)
    bins = estimate_bins(list(cuts), 30)
    ours, k, total = restore_ours(str(shar), bins)
    theirs, k2, total2 = restore_lhotse(lambda: CutSet.from_shar(in_dir=shar), bins)
    size = sum(p.stat().st_size for p in shar.glob("recording.*.tar")) / 2**20
    print(f"restore at 90% (batch {k}/{total}), Shar of {shar_cuts} cuts "
          f"({corpus.total_duration / 3600:.2f} h, {size:.0f} MiB FLAC): ours {ours:.3f} s, "
          f"Lhotse replay {theirs:.3f} s (batch {k2}/{total2}) -> {theirs / ours:.1f}x faster")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--real-cuts", type=int, default=300)
    ap.add_argument("--num-cuts", type=int, default=20000)
    ap.add_argument("--restore-cuts", type=int, default=100000)
    ap.add_argument("--shar-cuts", type=int, default=2000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        missing = wenet_missing()
        if missing:
            print(f"## steps per epoch and padding: skipped ({missing})")
        else:
            print("## steps per epoch: WeNet's own Dataset vs ours")
            steps_section(args.real_cuts, Path(d))
            print("## padding and batches per epoch")
            padding_section(args.num_cuts, Path(d))
        print("## restore cost")
        restore_section(args.restore_cuts, args.shar_cuts, Path(d))


if __name__ == "__main__":
    main()
