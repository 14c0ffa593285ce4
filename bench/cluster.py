"""Conversion throughput: local process pool vs a Dask cluster of 2 workers, this machine.

The same WeNet shard list (a generated corpus, realistic 1-15 s durations) is converted
to Lhotse Shar (``--audio-format lossless``, one task per input tar) three ways, each
into a fresh directory, outputs checked byte-identical:

* ``-j 1``: inline, one process (the baseline);
* ``-j 2``: the local process pool, 2 processes;
* ``--cluster``: a ``dask scheduler`` and 2 ``dask worker --nthreads 1`` processes
  started here on 127.0.0.1 (what a cluster adds: task shipping, result collection).

Printed: wall seconds, audio seconds converted per wall second, and the ratios. The
cluster-vs-``-j 1`` ratio divided by 2 is the parallel efficiency per worker; on N
machines with W workers each, throughput ~ efficiency x N x W x the per-worker rate,
as long as storage keeps up (each task reads one tar and writes one shard; the client
only submits and collects).

Run: ``python bench/cluster.py [--num-utts 400] [--shard-size 20]``.
"""

from __future__ import annotations

import argparse
import filecmp
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_cluster(workdir: Path):
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    log = open(workdir / "dask.log", "wb")
    sched = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler",
                              "--host", "127.0.0.1", "--port", str(port),
                              "--dashboard-address", ":0", "--no-show"],
                             stdout=log, stderr=log, env=env)
    address = f"tcp://127.0.0.1:{port}"
    workers = [subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", address,
                                 "--nthreads", "1", "--no-nanny", "--no-dashboard",
                                 "--host", "127.0.0.1",
                                 "--local-directory", str(workdir / f"w{i}")],
                                stdout=log, stderr=log, env=env) for i in range(2)]
    from distributed import Client

    with Client(address, timeout=60) as client:
        client.wait_for_workers(2, timeout=120)
        # A worker imports torch, Lhotse and wenet_lhotse once, on its first task; a
        # long conversion amortises that, so it is timed apart, not in the throughput.
        t0 = time.perf_counter()
        client.run(_warm_up)
        print(f"cluster: 2 workers up; importing wenet_lhotse on them took "
              f"{time.perf_counter() - t0:.1f} s (once per worker, not counted below)",
              flush=True)
    return address, [sched, *workers]


def _warm_up() -> None:
    import wenet_lhotse.convert.shar  # noqa: F401


def same_dirs(a: Path, b: Path) -> bool:
    import gzip

    names = sorted(p.name for p in a.iterdir())
    if names != sorted(p.name for p in b.iterdir()):
        return False
    for n in names:
        if n.endswith(".gz"):
            if gzip.decompress((a / n).read_bytes()) != gzip.decompress((b / n).read_bytes()):
                return False
        elif not filecmp.cmp(a / n, b / n, shallow=False):
            return False
    return True


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--num-utts", type=int, default=400)
    ap.add_argument("--shard-size", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=2, help="best of this many runs each")
    args = ap.parse_args()
    os.environ["OMP_NUM_THREADS"] = "1"
    from wenet_lhotse.convert.shar import wenet_to_shar
    from wenet_lhotse.corpus import generate_corpus

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        corpus = generate_corpus(work / "corpus", num_utterances=args.num_utts,
                                 min_duration=1.0, max_duration=15.0,
                                 duration_dist="realistic", shard_size=args.shard_size, seed=3)
        hours = corpus.total_duration / 3600
        print(f"corpus: {args.num_utts} utterances, {hours:.2f} h, "
              f"{args.num_utts // args.shard_size} tars; cpu count {os.cpu_count()}, "
              f"load {os.getloadavg()[0]:.1f}", flush=True)
        address, procs = start_cluster(work)
        try:
            runs = {}
            for name, kw in (("-j 1", {"num_jobs": 1}), ("-j 2", {"num_jobs": 2}),
                             ("dask 2 workers", {"cluster": address})):
                times = []
                for _ in range(args.repeats):  # best of: the machine may be shared
                    out = work / name.replace(" ", "_")
                    shutil.rmtree(out, ignore_errors=True)
                    t0 = time.perf_counter()
                    res = wenet_to_shar(corpus.shards_list, out, **kw)
                    times.append(time.perf_counter() - t0)
                    assert res.num_cuts_written == args.num_utts
                runs[name] = min(times)
                print(f"{name:>15}: {runs[name]:6.1f} s, "
                      f"{corpus.total_duration / runs[name]:6.0f} audio s/s", flush=True)
        finally:
            for p in procs:
                p.kill()
                p.wait()
        assert same_dirs(work / "-j_1", work / "dask_2_workers"), "cluster output differs"
        base = runs["-j 1"]
        print(f"speed-up vs -j 1: -j 2 {base / runs['-j 2']:.2f}x, "
              f"dask 2 workers {base / runs['dask 2 workers']:.2f}x "
              f"(per-worker efficiency {base / runs['dask 2 workers'] / 2:.0%}); "
              f"cluster output byte-identical to -j 1", flush=True)


if __name__ == "__main__":
    main()
