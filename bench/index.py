"""The shard index (``wenet-lhotse index``): indexing speed, index size, indexed vs
streamed loading of the same local shards, and the first batch / a resume at 90% of an
epoch over a large synthetic index.

Set-up, all in this process unless said:

1. a generated corpus (``--utts`` utterances of 1-6 s, 16 kHz WAV, tars of 20) as WeNet
   shards;
2. indexing it with one process (``num_jobs=1``, so its CPU time is this process's):
   utterances per CPU second and per wall second; the index's bytes per utterance x 1M
   (extrapolated from this measured size), next to the gzip Lhotse cuts manifest of the
   same utterances (what map mode reads for cuts);
3. one training epoch of the same shard list, streamed (no index) and indexed, side by
   side and alternated (S I S I), WeNet's aishell features (fbank 80, speed perturb,
   spec_aug) through ``build_dataloader`` with 1 DataLoader worker: utterances per
   second (wall), the ratio indexed / streamed;
4. the same on moto's S3 server (a local process) behind a TCP proxy that delays each
   request by ``--delay-ms`` (20 ms): the shard list names ``s3://`` tars, the index is
   in a cache directory; requests counted per epoch;
5. a synthetic index of ``--num-cuts`` rows (and one of ``--first-batch-cuts``, for
   the first batch only) (AISHELL-like durations, tars of 1,000,
   ``s3://`` names never opened) written with numpy; ``build_dataloader`` on it with the
   audio attacher switched off (the sampler alone: audio reading is step 3's):
   seconds to open it and get the first batch, and seconds to build a fresh loader,
   load a state taken at 90% of the epoch and get the next batch (checked equal);
6. index build memory (``--rss-sizes``): lists of ``n`` utterances of 10 ms (real
   uncompressed tars of ``--rss-per-tar``, written here), each indexed by
   ``index_shards`` in a fresh process (``num_jobs=1``): its peak RSS (``VmHWM``) and
   wall / CPU seconds; ``--many-tars N``: the same for N tars of one utterance each.

Run: ``python bench/index.py [--utts 300] [--num-cuts 200000] [--first-batch-cuts 10000000]``;
memory alone: ``python bench/index.py --only rss --rss-sizes 100000 1000000 --many-tars 100000``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import _paths  # noqa: F401  (the repository root, for tests/servers.py)
import numpy as np

from wenet_lhotse.cli.bench_cmd import AISHELL_DATASET_CONF
from wenet_lhotse.convert.index import index_shards
from wenet_lhotse.corpus import generate_corpus
from wenet_lhotse.formats import read_shard_list
from wenet_lhotse.formats.shard_index import write_columns
from wenet_lhotse.loader.build import build_dataloader
from wenet_lhotse.text.tokenizer import CharTokenizer

SAMPLER_CONF = {"batch_conf": {"batch_type": "dynamic", "max_frames_in_batch": 12000},
                "shuffle": True, "lhotse_conf": {"num_buckets": 30}}


class Ids:
    def __getitem__(self, cuts):
        return [c.id for c in cuts]


def indexing(corpus, n: int) -> dict:
    t0, c0 = time.perf_counter(), time.process_time()
    summary = index_shards(str(corpus.shards_list), num_jobs=1, full=True)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"utts": summary.utterances, "tars": summary.tars, "cpu_s": cpu, "wall_s": wall,
            "utt_per_cpu_s": summary.utterances / cpu, "utt_per_s": summary.utterances / wall,
            "index_bytes": summary.bytes,
            "index_mib_per_million": summary.bytes / n * 1e6 / 2**20}


def throughput(corpus) -> dict:
    conf = json.loads(json.dumps(AISHELL_DATASET_CONF))
    conf["batch_conf"] = {"batch_type": "static", "batch_size": 16}
    tok = CharTokenizer(str(corpus.units))
    index = str(corpus.shards_list) + ".index"
    hidden = index + ".off"
    runs = {"streamed": [], "indexed": []}
    for what in ("streamed", "indexed", "streamed", "indexed"):
        if what == "streamed":
            os.replace(index, hidden)
        _, loader = build_dataloader(str(corpus.shards_list), tok, conf, seed=1,
                                     num_workers=1)
        if what == "streamed":
            os.replace(hidden, index)
        t0 = time.perf_counter()
        n = sum(len(b["keys"]) for b in loader)
        runs[what].append(n / (time.perf_counter() - t0))
        assert type(loader).__name__ == ("StreamedDataLoader" if what == "streamed"
                                         else "MapDataLoader")
    best = {k: max(v) for k, v in runs.items()}
    return {"runs_utt_per_s": runs, "best_utt_per_s": best,
            "indexed_over_streamed": best["indexed"] / best["streamed"]}


def _epoch_rate(source: str, conf: dict, tok, kind: str) -> float:
    _, loader = build_dataloader(source, tok, conf, seed=1, num_workers=1)
    assert type(loader).__name__ == kind, type(loader).__name__
    t0 = time.perf_counter()
    n = sum(len(b["keys"]) for b in loader)
    return n / (time.perf_counter() - t0)


def s3_throughput(corpus, workdir: Path, delay_s: float) -> dict:
    """Step 3 with the tars on moto's S3 server behind a proxy adding ``delay_s`` to
    every request (``--s3``)."""
    import s3fs

    from tests.servers import DUMMY_CREDENTIALS, FaultyProxy, free_port, start_moto, stop

    class Slow:
        def __init__(self, sock, delay: float, counter: list) -> None:
            self.sock, self.delay, self.counter = sock, delay, counter

        def recv(self, n: int) -> bytes:
            data = self.sock.recv(n)
            if data[:4] in (b"GET ", b"HEAD", b"PUT ", b"POST"):
                self.counter.append(1)
                time.sleep(self.delay)
            return data

        def __getattr__(self, name):
            return getattr(self.sock, name)

    class LatencyProxy(FaultyProxy):
        requests: list = []

        def _pump(self, src, dst, downstream):
            super()._pump(src if downstream else Slow(src, delay_s, self.requests), dst,
                          downstream)

    port = free_port()
    moto = start_moto(port)
    proxy = LatencyProxy(port)
    try:
        os.environ.update({**DUMMY_CREDENTIALS, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}"})
        s3fs.S3FileSystem.clear_instance_cache()
        fs = s3fs.S3FileSystem(client_kwargs={"endpoint_url": f"http://127.0.0.1:{port}"})
        fs.mkdir("bench")
        tars = [line.strip() for line in open(corpus.shards_list) if line.strip()]
        for t in tars:
            fs.put_file(t, f"bench/shards/{Path(t).name}")
        os.environ["AWS_ENDPOINT_URL"] = proxy.endpoint
        s3fs.S3FileSystem.clear_instance_cache()
        lst = workdir / "s3.list"
        lst.write_text("".join(f"s3://bench/shards/{Path(t).name}\n" for t in tars))
        cache = str(workdir / "s3_index")
        index_shards(str(lst), cache_dir=cache, num_jobs=1)
        conf = json.loads(json.dumps(AISHELL_DATASET_CONF))
        conf["batch_conf"] = {"batch_type": "static", "batch_size": 16}
        tok = CharTokenizer(str(corpus.units))
        runs: dict = {"streamed": [], "indexed": [], "requests": {}}
        for what in ("streamed", "indexed", "streamed", "indexed"):
            conf["lhotse_conf"] = {"shard_index": False if what == "streamed" else cache}
            before = len(LatencyProxy.requests)
            kind = "StreamedDataLoader" if what == "streamed" else "MapDataLoader"
            runs[what].append(_epoch_rate(str(lst), conf, tok, kind))
            runs["requests"][what] = len(LatencyProxy.requests) - before
        best = {k: max(runs[k]) for k in ("streamed", "indexed")}
        return {"delay_ms": delay_s * 1000, "runs_utt_per_s": runs, "best_utt_per_s": best,
                "indexed_over_streamed": best["indexed"] / best["streamed"]}
    finally:
        proxy.close()
        stop(moto)


def synthetic_index(workdir: Path, n: int, per_tar: int = 1000) -> str:
    """A shard list of ``n / per_tar`` ``s3://`` tars and its index, written directly."""
    rng = np.random.default_rng(0)
    lst = workdir / f"synthetic_{n}.list"
    ntar = -(-n // per_tar)
    urls = [f"s3://bench-never-read/shards/{t:06d}.tar" for t in range(ntar)]
    lst.write_text("".join(u + "\n" for u in urls))
    dur = np.clip(rng.lognormal(1.5, 0.45, n), 1.0, 15.0)
    num_samples = (dur * 16000).astype(np.int64)
    sizes = num_samples * 2 + 44
    tar = np.repeat(np.arange(ntar, dtype=np.int32), per_tar)[:n]
    offsets = np.zeros(n, np.int64)
    for t in range(ntar):  # members laid out one after another, 512-byte headers
        s = sizes[t * per_tar:(t + 1) * per_tar]
        padded = 1024 + -(-s // 512) * 512
        offsets[t * per_tar:(t + 1) * per_tar] = np.cumsum(padded) - padded + 512
    pool = ["".join(chr(0x4E00 + int(c)) for c in rng.integers(0, 3000, int(k)))
            for k in rng.integers(8, 25, 1000)]
    keys = [b"BAC009S%04dW%07d" % (i % 400, i) for i in range(n)]
    texts = [pool[i % 1000].encode("utf-8") for i in range(n)]
    cols = {"tar": tar, "fmt": np.zeros(n, np.uint8), "offset": offsets, "size": sizes,
            "num_samples": num_samples, "rate": np.full(n, 16000, np.int32),
            "channels": np.ones(n, np.uint8), "crc": np.zeros(n, np.uint32)}
    for name, values in (("keys", keys), ("texts", texts), ("extras", [b""] * n)):
        cols[name] = np.frombuffer(b"".join(values), np.uint8)
        cols[name + "_end"] = np.cumsum([len(v) for v in values], dtype=np.int64)
    counts = np.bincount(tar, minlength=ntar)
    firsts = np.cumsum(counts) - counts
    header = [{"url": u, "size": None, "mtime_ns": None, "digest": None,
               "first": int(f), "count": int(c), "bad": []}
              for u, f, c in zip(urls, firsts, counts)]
    write_columns(str(lst) + ".index", header, ["wav"], cols, [str(lst)])
    return str(lst)


def _sampler_loader(source: str):
    _, loader = build_dataloader(source, None, SAMPLER_CONF, "train", dataset=Ids(), seed=1,
                                 num_workers=0)
    loader.dataset.attach = None  # the sampler alone: these tars do not exist
    return loader


def at_scale(workdir: Path, n: int, resume: bool = True) -> dict:
    t0 = time.perf_counter()
    source = synthetic_index(workdir, n)
    written = time.perf_counter() - t0
    size = os.path.getsize(source + ".index")
    t0, c0 = time.perf_counter(), time.process_time()
    loader = _sampler_loader(source)
    it = iter(loader)
    next(it)
    first, first_cpu = time.perf_counter() - t0, time.process_time() - c0
    out = {"num_cuts": n, "write_s": written, "index_bytes": size,
           "index_mib_per_million": size / n * 1e6 / 2**20,
           "first_batch_s": first, "first_batch_cpu_s": first_cpu}
    if not resume:
        return out
    seen, t1 = 0, time.perf_counter()
    while seen < 0.9 * n:
        seen += len(next(it))
    run_s = time.perf_counter() - t1
    state = loader.state_dict()
    expected = next(it)
    t0, c0 = time.perf_counter(), time.process_time()
    fresh = _sampler_loader(source)
    fresh.load_state_dict(state)
    got = next(iter(fresh))
    restore, restore_cpu = time.perf_counter() - t0, time.process_time() - c0
    assert got == expected, "the restored loader did not continue with the next batch"
    return {**out, "run_to_90pct_s": run_s, "resume_90pct_s": restore,
            "resume_90pct_cpu_s": restore_cpu, "state_bytes": len(json.dumps(state))}


def _tiny_wav(samples: int = 160) -> bytes:
    data = bytes(2 * samples)
    return (b"RIFF" + (36 + len(data)).to_bytes(4, "little") + b"WAVEfmt "
            + bytes.fromhex("1000000001000100803e0000007d00000200100064617461")
            + len(data).to_bytes(4, "little") + data)


def _member(name: str, data: bytes) -> bytes:
    """A ustar member (512-byte header, data padded to 512 bytes)."""
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info.tobuf(format=tarfile.USTAR_FORMAT) + data + bytes(-len(data) % 512)


def tiny_shards(root: Path, n: int, per_tar: int) -> str:
    """``n`` utterances of 10 ms (16 kHz WAV + a 9-digit text) in uncompressed tars of
    ``per_tar``; returns the shard list. Members are built from one template each
    (name and checksum patched): writing 1M utterances takes seconds, not minutes."""
    root.mkdir(parents=True, exist_ok=True)
    templates = {s: bytearray(_member(f"U{0:09d}.{s}", d))
                 for s, d in (("txt", b"0" * 9), ("wav", _tiny_wav()))}

    def member(u: int, suffix: str) -> bytes:
        buf = templates[suffix]
        buf[0:14] = b"U%09d.%s" % (u, suffix.encode())
        if suffix == "txt":
            buf[512:521] = b"%09d" % u
        buf[148:156] = b" " * 8
        buf[148:156] = b"%06o\0 " % sum(buf[:512])
        return bytes(buf)

    lines = []
    for t in range(-(-n // per_tar)):
        path = root / f"{t:07d}.tar"
        with open(path, "wb") as f:
            f.write(b"".join(member(u, s) for u in range(t * per_tar, min(n, (t + 1) * per_tar))
                             for s in ("txt", "wav")) + bytes(1024))
        lines.append(f"{path}\n")
    lst = root / "shards.list"
    lst.write_text("".join(lines))
    return str(lst)


_INDEX_CHILD = """
import resource, sys, time
from wenet_lhotse.convert.index import index_shards
t0, c0 = time.perf_counter(), time.process_time()
s = index_shards(sys.argv[1], num_jobs=1, full=True)
hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM')][0].split()[1]
print(s.utterances, s.tars, int(hwm) / 1024, time.perf_counter() - t0,
      time.process_time() - c0, s.bytes)
"""


def index_memory(workdir: Path, n: int, per_tar: int) -> dict:
    """Peak RSS of ``index_shards`` over ``n`` utterances in tars of ``per_tar``, in a
    fresh process (the tars are written first, then removed)."""
    root = workdir / f"rss_{n}_{per_tar}"
    t0 = time.perf_counter()
    lst = tiny_shards(root, n, per_tar)
    written = time.perf_counter() - t0
    try:
        out = subprocess.run([sys.executable, "-c", _INDEX_CHILD, lst], check=True,
                             capture_output=True, text=True).stdout.split()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    utts, tars, rss, wall, cpu, size = out
    return {"utterances": int(utts), "tars": int(tars), "peak_rss_mib": round(float(rss), 1),
            "index_wall_s": round(float(wall), 1), "index_cpu_s": round(float(cpu), 1),
            "index_bytes": int(size), "tars_written_s": round(written, 1)}


def manifest_size(corpus, n: int) -> dict:
    """The same utterances as a gzip Lhotse cuts manifest (what map mode reads)."""
    path = Path(corpus.root) / "cuts.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        for cut in read_shard_list(corpus.shards_list):
            d = cut.to_dict()
            d["recording"]["sources"] = [{"type": "shar", "channels": [0], "source": ""}]
            f.write(json.dumps(d, ensure_ascii=False) + "\n")
    size = os.path.getsize(path)
    return {"manifest_bytes": size, "manifest_mib_per_million": size / n * 1e6 / 2**20}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--utts", type=int, default=300)
    ap.add_argument("--num-cuts", type=int, default=200_000,
                    help="rows of the synthetic index for first batch and resume at 90%%")
    ap.add_argument("--first-batch-cuts", type=int, default=10_000_000,
                    help="rows of a second synthetic index: first batch only (0: skip)")
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--skip", nargs="*", default=[], choices=["throughput", "s3", "scale"])
    ap.add_argument("--only", choices=["rss"], default=None,
                    help="rss: the index build memory figures alone (step 6)")
    ap.add_argument("--rss-sizes", type=int, nargs="*", default=[100_000, 1_000_000],
                    help="utterances of each index build measured for peak RSS (step 6)")
    ap.add_argument("--rss-per-tar", type=int, default=1000)
    ap.add_argument("--many-tars", type=int, default=0,
                    help="also index this many tars of one utterance each (step 6)")
    ap.add_argument("--delay-ms", type=float, default=20.0,
                    help="latency added to each S3 request (the --s3 comparison)")
    args = ap.parse_args()
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="bench_index_"))
    if args.only == "rss":
        for n in args.rss_sizes:
            print(json.dumps({"index_memory": index_memory(workdir, n, args.rss_per_tar)}),
                  flush=True)
        if args.many_tars:
            print(json.dumps({"index_memory": index_memory(workdir, args.many_tars, 1)}),
                  flush=True)
        return
    corpus = generate_corpus(workdir / "corpus", num_utterances=args.utts, shard_size=20,
                             min_duration=1.0, max_duration=6.0, seed=0)
    out = {"machine": f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}"}
    out["indexing"] = indexing(corpus, args.utts)
    out["manifest"] = manifest_size(corpus, args.utts)
    print(json.dumps(out, indent=1), flush=True)
    if "throughput" not in args.skip:
        out["throughput"] = throughput(corpus)
        print(json.dumps(out["throughput"], indent=1), flush=True)
    if "s3" not in args.skip:
        out["s3"] = s3_throughput(corpus, workdir, args.delay_ms / 1000)
        print(json.dumps(out["s3"], indent=1), flush=True)
    if "scale" not in args.skip:
        out["scale"] = at_scale(workdir, args.num_cuts)
        print(json.dumps(out["scale"], indent=1), flush=True)
        if args.first_batch_cuts:
            out["first_batch"] = at_scale(workdir, args.first_batch_cuts, resume=False)
            print(json.dumps(out["first_batch"], indent=1), flush=True)
    out["machine_after"] = f"load {os.getloadavg()[0]:.1f}"
    print(json.dumps(out))


if __name__ == "__main__":
    main()
