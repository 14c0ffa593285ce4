#!/usr/bin/env python
"""Import/conversion benchmark (prints figures; not a test).

1. Raw list import rate (lines/s = files probed/s): header probing serial vs a
   process pool vs a thread pool, same list, side by side.
2. Shard -> Shar conversion rate against simply reading the same tar bytes
   (and against streaming the tars with ``tarfile``), side by side; the ratio
   is what matters, absolute numbers depend on the machine.
3. Reading WeNet tar shards into cuts (``--only reader``): CPU ms per MiB of tar, the
   shard reader's fast tar path against the same reader through ``tarfile`` and against
   a bare ``tarfile`` loop and reading the bytes, alternated, best of rounds
   (``time.process_time``, so other load on the machine matters little); with
   ``--before DIR`` also the reader of another checkout against this one, each pass in
   a fresh process.
4. Peak RSS while streaming a raw list of 100k and 1M lines, each in a fresh
   subprocess (``resource.getrusage(RUSAGE_SELF).ru_maxrss``): growth from the
   baseline must not depend on the list length (duplicate-key detection, on by
   default in the readers, costs 32-64 bytes per key and is measured separately).

Default run: a few minutes at most on 2 busy cores. Sizes are flags; see --help.

    python bench/import_bench.py
    python bench/import_bench.py --lines 50000 --shard-utts 1000 -j 8
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Optional

REPO = Path(__file__).resolve().parents[1]


def _cpu(who) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def _rss_mb() -> float:
    # ru_maxrss is in kilobytes on Linux.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _write_list(base_lines, path: Path, n: int, with_meta: bool) -> None:
    """``n`` lines cycling over the real files of ``base_lines`` with unique keys."""
    with open(path, "w", encoding="utf-8") as f:
        for i in range(n):
            obj = dict(base_lines[i % len(base_lines)])
            obj["key"] = f"utt{i:09d}"
            if not with_meta:
                obj.pop("duration", None)
                obj.pop("sample_rate", None)
            f.write(json.dumps(obj, ensure_ascii=False) + "\n")


def bench_raw_import(corpus, work: Path, lines: int, jobs: int) -> None:
    from wenet_lhotse.convert.raw import import_raw

    base = [json.loads(x) for x in corpus.data_list.read_text(encoding="utf-8").splitlines()]
    lst = work / "raw_import.list"
    _write_list(base, lst, lines, with_meta=False)
    print(f"\n== raw import: {lines} lines over {len(base)} real wav files "
          f"(headers probed; the files are in the page cache) ==")
    print("  (best of 2; 'caller CPU' is the CPU time of the calling process: with a process "
          "pool it bounds the speedup more cores could give)")
    rates = {}
    for name, workers, executor in (("serial", 1, "process"),
                                    (f"process pool x{jobs}", jobs, "process"),
                                    (f"thread pool x{jobs}", jobs, "thread")):
        best = None
        for _ in range(2):
            c0, k0 = _cpu(resource.RUSAGE_SELF), _cpu(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            res = import_raw(lst, work / "raw_import.jsonl.gz", num_workers=workers,
                             executor=executor)
            dt = time.perf_counter() - t0
            cpu = (_cpu(resource.RUSAGE_SELF) - c0, _cpu(resource.RUSAGE_CHILDREN) - k0)
            assert res.num_cuts == lines
            if best is None or dt < best[0]:
                best = (dt, cpu)
        dt, (caller, workers_cpu) = best
        rates[name] = lines / dt
        print(f"  {name:<18} {rates[name]:8.0f} lines/s  ({dt:.2f} s; caller CPU "
              f"{caller / lines * 1e6:5.0f} us/line, worker processes "
              f"{workers_cpu / lines * 1e6:5.0f} us/line)")
    serial = rates["serial"]
    for name, r in rates.items():
        if name != "serial":
            print(f"  {name} / serial: {r / serial:.2f}x")


def _read_bytes(tars) -> int:
    n = 0
    for t in tars:
        with open(t, "rb") as f:
            while True:
                b = f.read(1 << 20)
                if not b:
                    break
                n += len(b)
    return n


def _stream_tars(tars) -> int:
    n = 0
    for t in tars:
        with tarfile.open(t, mode="r|") as tar:
            for m in tar:
                n += len(tar.extractfile(m).read())
    return n


def bench_shar(work: Path, utts: int, shard_size: int, jobs: int) -> None:
    from wenet_lhotse.convert.shar import wenet_to_shar
    from wenet_lhotse.corpus import generate_corpus

    corpus = generate_corpus(work / "shard_corpus", num_utterances=utts, min_duration=1.0,
                             max_duration=6.0, duration_dist="realistic", shard_size=shard_size,
                             seed=1)
    tars = corpus.shards_list.read_text().split()
    size = sum(os.path.getsize(t) for t in tars)
    hours = corpus.total_duration / 3600
    print(f"\n== shards -> Shar: {utts} utterances ({hours:.2f} h), {len(tars)} tars, "
          f"{size / 1e6:.1f} MB ==")
    _read_bytes(tars)  # warm the page cache so every contender reads from memory
    rows = []
    t0 = time.perf_counter()
    _read_bytes(tars)
    rows.append(("read tar bytes", time.perf_counter() - t0))
    t0 = time.perf_counter()
    _stream_tars(tars)
    rows.append(("tarfile stream members", time.perf_counter() - t0))
    from wenet_lhotse.formats import read_shard_list

    t0 = time.perf_counter()
    for cut in read_shard_list(corpus.shards_list):
        cut.load_audio()
    rows.append(("read cuts + decode audio", time.perf_counter() - t0))
    for fmt, j in [("lossless", j) for j in sorted({1, jobs})] + [("copy", 1)]:
        best = float("inf")
        for attempt in range(2):  # best of 2 (a fresh output directory each time)
            out = work / f"shar_{fmt}_j{j}_{attempt}"
            t0 = time.perf_counter()
            res = wenet_to_shar(corpus.shards_list, out, num_jobs=j, audio_format=fmt)
            best = min(best, time.perf_counter() - t0)
            assert res.num_cuts_written == utts
        rows.append((f"to Shar {fmt} -j {j}", best))
    base = rows[0][1]
    for name, dt in rows:
        print(f"  {name:<24} {dt:8.3f} s  {utts / dt:10.0f} utt/s  {size / 1e6 / dt:8.1f} MB/s  "
              f"{corpus.total_duration / dt:9.0f}x real time  ratio to read {dt / base:8.1f}")


_READER_CHILD = """
import sys, time
from wenet_lhotse.formats.shard_reader import LazyWenetShardIterator
run = lambda: sum(1 for _ in LazyWenetShardIterator(sys.argv[1:]))
run()
t0 = time.process_time()
run()
print(time.process_time() - t0)
"""


def _reader_in(code: Path, tars) -> float:
    """CPU seconds of one pass of the shard reader of the checkout at ``code``."""
    env = dict(os.environ, PYTHONPATH=str(code))
    out = subprocess.run([sys.executable, "-c", _READER_CHILD, *tars], env=env, cwd="/",
                         capture_output=True, text=True, check=True)
    return float(out.stdout.split()[-1])


def bench_reader(work: Path, utts: int, shard_size: int, rounds: int,
                 before: Optional[Path]) -> None:
    from wenet_lhotse.corpus import generate_corpus
    from wenet_lhotse.formats.shard_reader import LazyWenetShardIterator

    corpus = generate_corpus(work / "reader_corpus", num_utterances=utts, min_duration=1.0,
                             max_duration=15.0, duration_dist="realistic",
                             shard_size=shard_size, seed=2)
    tars = corpus.shards_list.read_text().split()
    mib = sum(os.path.getsize(t) for t in tars) / 2**20
    print(f"\n== reading shards into cuts: {utts} utterances, {len(tars)} tars, "
          f"{mib:.1f} MiB (CPU ms per MiB, best of {rounds}) ==")

    def reader(fast: bool):
        def run() -> int:
            it = LazyWenetShardIterator(tars)
            it.fast_tar = fast
            return sum(1 for _ in it)
        return run

    contenders = [("read tar bytes", lambda: _read_bytes(tars)),
                  ("tarfile stream members", lambda: _stream_tars(tars)),
                  ("shard reader via tarfile", reader(False)),
                  ("shard reader, fast path", reader(True))]
    best = {name: float("inf") for name, _ in contenders}
    if before is not None:  # whole passes in fresh processes, this tree's and before's
        best.update({"this tree (process)": float("inf"), f"{before} (process)": float("inf")})
    for _ in range(rounds + 1):  # the first round warms up (page cache, imports)
        for name, fn in contenders:
            t0 = time.process_time()
            fn()
            best[name] = min(best[name], time.process_time() - t0)
        if before is not None:
            for name, code in (("this tree (process)", REPO), (f"{before} (process)", before)):
                best[name] = min(best[name], _reader_in(code, tars))
    for name, cpu in best.items():
        print(f"  {name:<26} {cpu * 1e3 / mib:7.2f} ms/MiB  {mib / cpu:8.0f} MiB/s")
    ratio = best["shard reader, fast path"] / best["shard reader via tarfile"]
    print(f"  fast path / via tarfile: {ratio:.2f}x CPU (both with the same per-cut work)")
    if before is not None:
        ratio = best["this tree (process)"] / best[f"{before} (process)"]
        print(f"  this tree / {before}: {ratio:.2f}x CPU")


def _rss_child(list_path: str, check_duplicates: bool, probe: bool, what: str) -> None:
    if what == "import":  # the whole import path: pool, serializer, gzip writer
        from wenet_lhotse.convert.raw import iter_raw_cuts_with_lines

        out = Path(list_path).with_suffix(".jsonl.gz")
        import gzip

        def gen():
            with gzip.open(out, "wb", compresslevel=6) as f:
                for (_, _, line), _, _ in iter_raw_cuts_with_lines(
                        list_path, num_workers=2, as_json=True, probe=probe,
                        check_duplicates=check_duplicates):
                    f.write(line)
                    yield line

        cuts = gen()
    else:
        from wenet_lhotse.formats.raw_list import read_raw_list

        cuts = read_raw_list(list_path, probe=probe, check_duplicates=check_duplicates)
    # Warm up: the first cuts import lazily loaded modules; the baseline follows them.
    it = iter(cuts)
    n = 0
    for _ in range(1000):
        next(it)
        n += 1
    before = _rss_mb()
    t0 = time.perf_counter()
    for _ in it:
        n += 1
    dt = time.perf_counter() - t0
    print(json.dumps({"n": n, "before_mb": before, "peak_mb": _rss_mb(), "seconds": dt}))


def bench_rss(corpus, work: Path, small: int, large: int, probe: bool, what: str) -> None:
    base = [json.loads(x) for x in corpus.data_list.read_text(encoding="utf-8").splitlines()]
    import soundfile as sf

    for obj in base:  # lines carrying duration/sample_rate may skip the header probe
        info = sf.info(obj["wav"])
        obj["duration"], obj["sample_rate"] = info.frames / info.samplerate, info.samplerate
    name = "read_raw_list" if what == "read" else "import_raw path, 2 workers"
    print(f"\n== peak RSS streaming a raw list ({name}, probe={probe}; lines over "
          f"{len(base)} real files; fresh subprocess each) ==")
    lists = {}
    for n in (small, large):
        lists[n] = work / f"rss_{n}.list"
        _write_list(base, lists[n], n, with_meta=True)
    runs = [(small, False), (large, False), (large, True)]
    results = {}
    for n, dups in runs:
        cmd = [sys.executable, __file__, "--rss-child", str(lists[n]), "--rss-what", what]
        if dups:
            cmd.append("--rss-dups")
        if probe:
            cmd.append("--rss-probe")
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        r = json.loads(out.strip().splitlines()[-1])
        results[(n, dups)] = r
        print(f"  {n:>9} lines  duplicate check {'on ' if dups else 'off'}  "
              f"baseline {r['before_mb']:7.1f} MB  peak {r['peak_mb']:7.1f} MB  "
              f"growth {r['peak_mb'] - r['before_mb']:6.1f} MB  "
              f"({r['n'] / r['seconds']:.0f} lines/s)")
    g_small = results[(small, False)]["peak_mb"] - results[(small, False)]["before_mb"]
    g_large = results[(large, False)]["peak_mb"] - results[(large, False)]["before_mb"]
    print(f"  growth {large} vs {small} lines (no duplicate check): "
          f"{g_large:.1f} MB vs {g_small:.1f} MB")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lines", type=int, default=20000, help="raw import: list lines")
    ap.add_argument("--wavs", type=int, default=200, help="real wav files the lists cycle over")
    ap.add_argument("--shard-utts", type=int, default=300, help="shard->Shar: utterances")
    ap.add_argument("--shard-size", type=int, default=50, help="shard->Shar: utterances per tar")
    ap.add_argument("--reader-utts", type=int, default=400, help="reader: utterances")
    ap.add_argument("--reader-rounds", type=int, default=5, help="reader: rounds")
    ap.add_argument("--before", type=Path, default=None,
                    help="reader: also time the shard reader of this checkout (e.g. a "
                         "`git worktree add` of an older commit), side by side")
    ap.add_argument("--rss-small", type=int, default=100_000, help="RSS: short list lines")
    ap.add_argument("--rss-large", type=int, default=1_000_000, help="RSS: long list lines")
    ap.add_argument("--rss-probe", action="store_true",
                    help="RSS: probe every header (slow: ~5k lines/s) instead of trusting "
                         "the lines' duration/sample_rate")
    ap.add_argument("--rss-what", choices=["read", "import"], default="read",
                    help="RSS: stream with read_raw_list (default) or through import_raw's "
                         "pool + serializer + gzip writer (slower: use smaller sizes)")
    ap.add_argument("-j", "--jobs", type=int, default=min(4, os.cpu_count() or 1),
                    help="pool size for the parallel runs")
    ap.add_argument("--only", choices=["raw", "shar", "reader", "rss"], action="append",
                    help="run only these parts (repeatable)")
    ap.add_argument("--workdir", type=Path, default=None, help="keep files here (default: tmp)")
    ap.add_argument("--rss-child", help=argparse.SUPPRESS)
    ap.add_argument("--rss-dups", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.rss_child:
        _rss_child(args.rss_child, args.rss_dups, args.rss_probe, args.rss_what)
        return

    import logging

    logging.basicConfig(level=logging.WARNING)
    from wenet_lhotse.corpus import generate_corpus

    parts = args.only or ["raw", "shar", "reader", "rss"]
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.2f}, pool size {args.jobs}")
    with tempfile.TemporaryDirectory() as tmp:
        work = args.workdir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        corpus = generate_corpus(work / "corpus", num_utterances=args.wavs, min_duration=1.0,
                                 max_duration=3.0, seed=0)
        if "raw" in parts:
            bench_raw_import(corpus, work, args.lines, args.jobs)
        if "shar" in parts:
            bench_shar(work, args.shard_utts, args.shard_size, args.jobs)
        if "reader" in parts:
            bench_reader(work, args.reader_utts, args.shard_size, args.reader_rounds,
                         args.before.resolve() if args.before else None)
        if "rss" in parts:
            bench_rss(corpus, work, args.rss_small, args.rss_large, args.rss_probe,
                      args.rss_what)
        print(f"\ntotal {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
