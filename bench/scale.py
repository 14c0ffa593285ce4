"""The sampler at corpus scale (metadata only, no audio): 10M cuts by default.

Generates on disk (streaming, under --workdir, reused when present):

* a metadata-only Shar directory: ``cuts.NNNNNN.jsonl.gz``, 10,000 cuts each, no
  audio tars (AISHELL-like durations 1-15 s, mean ~5 s; each cut names a WAV path
  that is never opened);
* a WeNet raw list of ``--raw-lines`` lines, all naming one real 1 s WAV (so probing a
  header costs its lower bound: the header is always in the page cache).

Then, each measurement in a fresh process (so peak RSS is its own), as rank 0 of
``--world-size`` (``RANK``/``WORLD_SIZE`` set, no process group: the sampler's
rank split is the same), the training loader of ``build_dataloader`` with WeNet's
dynamic batch (12,000 frames), 30 duration buckets, and a dataset that returns the
batch's cut ids (no audio, no features: the sampler alone):

* map mode: seconds from building the loader to its first batch, batches/s over
  ``--seconds``, peak RSS;
* streamed mode: the same, the sampler running in the training process
  (``num_workers=0``; with workers it runs once per worker);
* resume at 90% of the epoch (map mode): seconds to build a fresh loader, load the
  state dict and get the next batch (checked equal to the batch the first loader gave);
* raw list: building a loader and getting its first batch with no probe cache (every
  header read) vs with the cache the first run wrote; at ``--raw-lines`` lines;
* the training step of the smallest recipe model (``recipes/aishell/conf/
  train_tiny.yaml``: ``TinyCtcModel`` hidden 256, 3 layers) on a 12,000-frame batch on
  this CPU, to compare with the sampler's rate.

Run: ``python bench/scale.py [--num-cuts 10000000] [--raw-lines 1000000]``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import resource
import subprocess
import sys
import time
from pathlib import Path

SHARD = 10_000
CONF = {"batch_conf": {"batch_type": "dynamic", "max_frames_in_batch": 12000},
        "shuffle": True, "lhotse_conf": {"num_buckets": 30}}


def _durations(n: int, seed: int):
    rng = random.Random(seed)
    for _ in range(n):
        yield min(15.0, max(1.0, rng.lognormvariate(1.5, 0.45)))


def generate(workdir: Path, n: int, raw_lines: int) -> None:
    """The metadata Shar dir and raw list (skipped when a previous run made them)."""
    shar = workdir / f"shar_{n}"
    done = shar / "DONE"
    if not done.exists():
        shar.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        tpl = ('{{"id":"u{i:09d}","start":0,"duration":{d},"channel":0,"supervisions":'
               '[{{"id":"u{i:09d}","recording_id":"u{i:09d}","start":0,"duration":{d},'
               '"channel":0,"text":"{t}"}}],"recording":{{"id":"u{i:09d}","sources":'
               '[{{"type":"file","channels":[0],"source":"/data/wav/u{i:09d}.wav"}}],'
               '"sampling_rate":16000,"num_samples":{s},"duration":{d}}},"type":"MonoCut"}}\n')
        text = "我们今天去公园散步然后回家吃饭" * 2
        f = None
        for i, d in enumerate(_durations(n, 1)):
            if i % SHARD == 0:
                if f is not None:
                    f.close()
                f = gzip.open(shar / f"cuts.{i // SHARD:06d}.jsonl.gz", "wt", compresslevel=1,
                              encoding="utf-8")
            s = int(round(d * 16000))
            d = s / 16000
            f.write(tpl.format(i=i, d=d, s=s, t=text[: 5 + i % 20]))
        f.close()
        done.write_text("ok\n")
        print(f"generated {n} cuts in {shar} in {time.perf_counter() - t0:.0f} s", flush=True)
    raw = workdir / f"raw_{raw_lines}.list"
    if raw_lines and not raw.exists():
        # Every line names the same real 1 s WAV: header probing then costs its lower
        # bound (the header is in the page cache), never a disk seek.
        import numpy as np
        import soundfile as sf

        wav = workdir / "one.wav"
        sf.write(wav, np.zeros(16000, dtype=np.int16), 16000, subtype="PCM_16")
        tmp = raw.with_suffix(".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            for i in range(raw_lines):
                f.write(json.dumps({"key": f"u{i:09d}", "wav": str(wav),
                                    "txt": "我们今天去公园散步"}, ensure_ascii=False) + "\n")
        tmp.rename(raw)


class Ids:
    def __getitem__(self, cuts):
        return [c.id for c in cuts]


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure(source: str, mode: str, seconds: float, extra: dict) -> dict:
    """In this (fresh) process: first batch, batches/s, peak RSS."""
    from wenet_lhotse.loader.build import build_dataloader

    conf = {**CONF, "lhotse_conf": {**CONF["lhotse_conf"], "mode": mode, **extra}}
    t0, c0 = time.perf_counter(), time.process_time()
    _, loader = build_dataloader(source, None, conf, "train", dataset=Ids(), seed=1,
                                 num_workers=0)
    built = time.perf_counter() - t0
    it = iter(loader)
    next(it)
    first, first_cpu = time.perf_counter() - t0, time.process_time() - c0
    n, t1, c1 = 0, time.perf_counter(), time.process_time()
    while time.perf_counter() - t1 < seconds:
        next(it)
        n += 1
    # CPU seconds as well as wall: on a shared machine the CPU figures are the stable ones
    return {"first_batch_s": first, "first_batch_cpu_s": first_cpu, "build_s": built,
            "batches_per_s": n / (time.perf_counter() - t1),
            "batches_per_cpu_s": n / (time.process_time() - c1), "peak_rss_mb": peak_rss_mb()}


def measure_resume(source: str, fraction: float, num_cuts: int, world_size: int) -> dict:
    """Restore at ``fraction`` of the epoch (map mode), timed from building the loader.
    One pass: the first loader runs until it has emitted ``fraction`` of this rank's
    cuts (``num_cuts / world_size``), saves its state and the next batch."""
    from wenet_lhotse.loader.build import build_dataloader

    def build():
        return build_dataloader(source, None, CONF, "train", dataset=Ids(), seed=1,
                                num_workers=0)[1]

    loader = build()
    it = iter(loader)
    target = fraction * num_cuts / world_size
    seen = k = 0
    t0 = time.perf_counter()
    while seen < target:
        seen += len(next(it))
        k += 1
    run_s = time.perf_counter() - t0
    sd = loader.state_dict()
    expected = next(it)
    t0, c0 = time.perf_counter(), time.process_time()
    fresh = build()
    fresh.load_state_dict(sd)
    got = next(iter(fresh))
    restore, restore_cpu = time.perf_counter() - t0, time.process_time() - c0
    assert got == expected, "restored loader did not continue with the next batch"
    # How far back the buffered cuts reach, and how many carry their line in the state
    # (those read more than 2 * buffer_size positions before): restoring rereads,
    # unparsed, only the files holding the others.
    items = _buffered_items(sd)
    reread = [i[1] for i in items if len(i) == 5]
    return {"restore_s": restore, "restore_cpu_s": restore_cpu, "batch": k, "cuts": seen,
            "run_s": run_s, "peak_rss_mb": peak_rss_mb(),
            "span": [min(i[1] for i in items), max(i[1] for i in items)],
            "reread_span": [min(reread), max(reread)] if reread else None,
            "inline": len(items) - len(reread), "buffered": len(items),
            "state_bytes": len(json.dumps(sd))}


def _buffered_items(state) -> list:
    """The buffered-cut items of a map loader's state: ``[stream, position, ...]``, with a
    sixth element (the index of the cut's kept manifest line) for cuts read long before."""
    snap = state["sampler"]["snapshot"]
    return [i for b in snap["buckets"] + snap["merged"] for i in b]


def measure_raw(raw_list: str) -> dict:
    """Building + first batch from a raw list: no cache, then the cache the first
    build wrote (second process)."""
    from wenet_lhotse.loader.build import build_dataloader

    cache = str(Path(raw_list).parent / "probe_cache")
    conf = {**CONF, "lhotse_conf": {**CONF["lhotse_conf"], "mode": "map",
                                    "probe_cache": cache}}
    t0 = time.perf_counter()
    _, loader = build_dataloader(raw_list, None, conf, "train", dataset=Ids(), seed=1,
                                 num_workers=0)
    next(iter(loader))
    return {"first_batch_s": time.perf_counter() - t0, "peak_rss_mb": peak_rss_mb()}


def measure_step() -> dict:
    """One training step of the smallest recipe model on a 12,000-frame batch."""
    import torch

    from wenet_lhotse.demo.model import TinyCtcModel

    torch.manual_seed(0)
    model = TinyCtcModel(4233, num_mel_bins=80, hidden=256, num_layers=3)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    b, t = 24, 500  # 12,000 frames: ~5 s utterances at a 10 ms shift
    batch = {"feats": torch.randn(b, t, 80), "feats_lengths": torch.full((b,), t),
             "target": torch.randint(1, 4233, (b, 20)), "target_lengths": torch.full((b,), 20)}
    times = []
    for _ in range(4):
        t0 = time.perf_counter()
        opt.zero_grad()
        model(batch)["loss"].backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    return {"step_s": min(times[1:]), "threads": torch.get_num_threads()}


def child(args) -> None:
    import logging
    import warnings

    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    what = args.child
    if what == "map":
        out = measure(args.source, "map", args.seconds, {})
    elif what == "streamed":
        out = measure(args.source, "streamed", args.seconds, {})
    elif what == "resume":
        out = measure_resume(args.source, 0.9, args.resume_cuts, args.world_size)
    elif what == "raw":
        out = measure_raw(args.source)
    elif what == "step":
        out = measure_step()
    else:
        raise ValueError(what)
    print("RESULT " + json.dumps(out), flush=True)


def _figures(r: dict) -> str:
    return (f"first batch {r['first_batch_s']:.2f} s ({r['first_batch_cpu_s']:.2f} CPU s; "
            f"building the loader {r['build_s']:.2f} s), {r['batches_per_s']:.0f} batches/s "
            f"({r['batches_per_cpu_s']:.0f} per CPU s), peak RSS {r['peak_rss_mb']:.0f} MiB")


def run_child(what: str, source: str, args, env_extra: dict) -> dict:
    env = {**os.environ, **env_extra}
    cmd = [sys.executable, __file__, "--child", what, "--source", source,
           "--seconds", str(args.seconds), "--resume-cuts", str(args.resume_cuts),
           "--world-size", str(args.world_size)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise RuntimeError(f"{what} failed:\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}")


def compare(args, shar: str, rank0: dict, ours: str) -> None:
    """Map mode with another checkout's package vs this one, alternating: CPU seconds to
    the first batch and batches per CPU second (medians), and their ratios."""
    import statistics

    runs: dict = {"baseline": [], "this": []}
    for _ in range(args.rounds):
        for name, tree in (("baseline", args.baseline_tree), ("this", ours)):
            runs[name].append(run_child("map", shar, args, {**rank0, "PYTHONPATH": tree}))
    med = {n: {k: statistics.median(r[k] for r in rs)
               for k in ("first_batch_cpu_s", "batches_per_cpu_s")} for n, rs in runs.items()}
    b, t = med["baseline"], med["this"]
    print(f"map mode at {args.num_cuts} cuts, {args.baseline_tree} vs this tree "
          f"(medians of {args.rounds} alternating runs): first batch "
          f"{b['first_batch_cpu_s']:.2f} vs {t['first_batch_cpu_s']:.2f} CPU s "
          f"({b['first_batch_cpu_s'] / t['first_batch_cpu_s']:.1f}x less), "
          f"{b['batches_per_cpu_s']:.0f} vs {t['batches_per_cpu_s']:.0f} batches per CPU s "
          f"({t['batches_per_cpu_s'] / b['batches_per_cpu_s']:.1f}x)", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--num-cuts", type=int, default=10_000_000)
    ap.add_argument("--raw-lines", type=int, default=1_000_000)
    ap.add_argument("--resume-cuts", type=int, default=1_000_000,
                    help="corpus size for the resume figure (reaching 90%% of an epoch "
                         "takes 0.9 epoch of sampling)")
    ap.add_argument("--world-size", type=int, default=2)
    ap.add_argument("--ref-cuts", type=int, default=200_000,
                    help="also measure start-up at this size, side by side (0: no)")
    ap.add_argument("--seconds", type=float, default=10.0, help="batches/s measured over this")
    ap.add_argument("--workdir", default="/tmp/wenet_lhotse_scale")
    ap.add_argument("--skip", default="", help="comma-separated: map,streamed,resume,raw,step")
    ap.add_argument("--baseline-tree", default=None,
                    help="a checkout of another version (e.g. `git worktree add /tmp/old "
                         "REV`): map mode at --num-cuts with its package and with this one, "
                         "alternating --rounds times, CPU figures and ratios printed")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--source", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
        return
    root = Path(__file__).resolve().parent.parent
    os.environ["PYTHONPATH"] = os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])
    workdir = Path(args.workdir)
    generate(workdir, args.num_cuts, args.raw_lines)
    shar = str(workdir / f"shar_{args.num_cuts}")
    rank0 = {"RANK": "0", "WORLD_SIZE": str(args.world_size)}
    skip = set(args.skip.split(","))
    print(f"corpus: {args.num_cuts} cuts (metadata-only Shar, {SHARD} per file), rank 0 of "
          f"{args.world_size}, cpu count {os.cpu_count()}, load {os.getloadavg()[0]:.1f}",
          flush=True)
    rate = {}
    for mode in ("map", "streamed"):
        if mode in skip:
            continue
        if args.ref_cuts:
            generate(workdir, args.ref_cuts, 0)
            r = run_child(mode, str(workdir / f"shar_{args.ref_cuts}"), args, rank0)
            print(f"{mode:>8} at {args.ref_cuts} cuts: {_figures(r)}", flush=True)
        r = run_child(mode, shar, args, rank0)
        rate[mode] = (r["batches_per_s"], r["batches_per_cpu_s"])
        print(f"{mode:>8} at {args.num_cuts} cuts: {_figures(r)}", flush=True)
    if args.baseline_tree:
        compare(args, shar, rank0, str(root))
    if "resume" not in skip:
        if args.resume_cuts != args.num_cuts:
            generate(workdir, args.resume_cuts, 0)
        r = run_child("resume", str(workdir / f"shar_{args.resume_cuts}"), args, rank0)
        print(f"  resume: {args.resume_cuts} cuts, at 90% of rank 0's epoch (batch "
              f"{r['batch']}, {r['cuts']} cuts, {r['run_s']:.0f} s of sampling to get there): "
              f"restored and next batch in {r['restore_s']:.2f} s ({r['restore_cpu_s']:.2f} CPU "
              f"s), peak RSS "
              f"{r['peak_rss_mb']:.0f} MiB; the {r['buffered']} buffered cuts span stream "
              f"positions {r['span'][0]}-{r['span'][1]}; {r['inline']} of them, read "
              f"long before, carry their line in the state ({r['state_bytes'] / 1e6:.1f} MB "
              f"as JSON), the others are reread from positions {r['reread_span']}",
              flush=True)
    if "raw" not in skip:
        raw = str(workdir / f"raw_{args.raw_lines}.list")
        for p in (workdir / "probe_cache").glob("*"):
            p.unlink()  # a cache from an earlier run: measure the first run again
        cold = run_child("raw", raw, args, rank0)
        warm = run_child("raw", raw, args, rank0)
        print(f"raw list of {args.raw_lines} lines (lhotse_conf.probe_cache, one rank probing "
              f"all): first batch {cold['first_batch_s']:.1f} s when it probes every header "
              f"and writes the cache (peak RSS {cold['peak_rss_mb']:.0f} MiB), "
              f"{warm['first_batch_s']:.1f} s from the cache (peak RSS "
              f"{warm['peak_rss_mb']:.0f} MiB): "
              f"{cold['first_batch_s'] / warm['first_batch_s']:.1f}x", flush=True)
    if "step" not in skip:
        s = run_child("step", "-", args, {})
        print(f"training step of the smallest recipe model (TinyCtcModel 256x3, 12,000 "
              f"frames, {s['threads']} CPU threads): {s['step_s']:.2f} s", flush=True)
        for mode, (r, r_cpu) in rate.items():
            # The map sampler runs in the training process: with a core of its own it
            # goes at its per-CPU-second rate.
            print(f"  {mode} sampler vs that step: {r * s['step_s']:.0f}x; it stays >= 20x "
                  f"ahead of any training step longer than {20 / r * 1000:.0f} ms at the "
                  f"rate measured ({20 / r_cpu * 1000:.0f} ms on a core of its own)",
                  flush=True)


if __name__ == "__main__":
    main()
