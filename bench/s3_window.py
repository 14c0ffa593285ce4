"""The window order on object storage (issue 29): bytes fetched per epoch, throughput,
first batch, resume at 90%, and how random the order is, side by side in one run.

Set-up, all on this machine:

1. 200 generated utterances of 2-4 s (16 kHz WAV) copied under new keys into WeNet
   tars: ``--tars`` tars of ``--per-tar`` (default 10 x 200, about 19 MB each) and
   ``--big-tars`` of ``--big-per-tar`` (default 2 x 1,040, about 100 MB each);
2. moto's S3 server (``ThreadedMotoServer`` in a local process, as the tests start it)
   behind a TCP proxy (a process of its own) that delays every request by
   ``--delay-ms`` (20 ms) and counts requests and bytes sent back; the lists name
   ``s3://`` tars, each indexed into a cache directory (``wenet-lhotse index
   --cache-dir``) before anything is counted;
3. for each tar set and ``--workers`` (1 and 2 DataLoader workers): one epoch each of
   *streamed* (no index), *global* (the index, today's order: tars shuffled, the
   sampler's buffer of 20,000 mixing all of them) and *window* (the index with
   ``read_window_mb: --window-mb``), static batches of 16; the dataset decodes each
   cut's audio (no features, so reading dominates): utterances per wall second over the
   epoch and over its last 75% (*steady*: from the batch that reaches 25% of the
   utterances to the end, past the start-up; *streamed* reads much of its audio into
   its sampler's buffer early, so its steady figure is not comparable: compare whole
   epochs: streamed reads its workers' whole share into the buffer by the second or
   third batch, then only decodes), seconds to its first batch, *stall_s* (seconds the
   batches after the first waited beyond 3x the median wait between batches: a
   window's copies, or a streamed worker's buffer, not there yet), bytes
   fetched / tar bytes, requests. Each run starts with an empty spool; *global* runs on
   the first set with 1 worker only (``--global-all`` for all: it fetches ~46x), and
   with ``--global-utts N`` over the first N utterances only (its bytes then scaled
   to the epoch by utterances read); ``--rounds N`` runs N rounds of a streamed and a
   window epoch per row, the order alternating, and prints window / streamed per round
   and the median (``longest_waits``: the 3 longest waits for a batch, with the
   utterances before each);
4. the spool alone on the first set (nothing decoding; ``--skip fetch`` to leave it
   out): every tar prefetched by a fresh ``TarSpool`` with at most 2 spans in flight
   (one tar at a time, the fetch before issue 29's second round) and with ``STREAMS``
   (several tars at once), MB/s and CPU seconds of the process, ``max(2, --rounds)``
   rounds;
5. the window order on the first set: seconds to the first batch of a fresh loader, and
   seconds to build a fresh loader, load a state taken at 90% of the epoch and get
   its next batch (checked equal), the spool empty each time;
6. randomness, on the same tars read locally (keys only): the share of the utterance
   pairs batched together in epoch 2 that were batched together in epoch 1, and how
   far the utterances of one tar spread over the epoch (first to last batch holding
   one, as a fraction of the epoch; mean over tars), for window / global / streamed
   and WeNet's loader order (list shuffle, ``torch``'s shuffle buffer of 1,500, sort
   buffer 500, static batches of 16: aishell's ``dataset_conf``, reimplemented here
   from ``wenet/dataset`` + torchdata's ``Shuffler``).

Run: ``python bench/s3_window.py`` (full size) or ``--small`` (4 x 40 and 1 x 200).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import shutil
import socket
import statistics
import tarfile
import tempfile
import threading
import time
from itertools import combinations
from pathlib import Path

import _paths  # noqa: F401  (the repository root, for tests/servers.py)

from wenet_lhotse.convert.index import index_shards
from wenet_lhotse.corpus import generate_corpus
from wenet_lhotse.loader.build import build_dataloader

BATCH = {"batch_type": "static", "batch_size": 16}


class Audio:
    """Decode each cut's audio; the batch is its keys."""

    def __getitem__(self, cuts):
        return {"keys": [c.id for c in cuts if c.load_audio() is not None]}


class Keys:
    def __getitem__(self, cuts):
        return {"keys": [c.id for c in cuts]}


def write_tars(src: Path, out: Path, ntars: int, per_tar: int, tag: str) -> list:
    """``ntars`` tars of ``per_tar`` utterances, the generated corpus's audio and text
    copied under new keys."""
    items = []
    for line in (src / "data.list").read_text().splitlines():
        d = json.loads(line)
        items.append((Path(d["wav"]).read_bytes(), d["txt"]))
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for t in range(ntars):
        path = out / f"{tag}_{t:04d}.tar"
        with tarfile.open(path, "w") as tf:
            for u in range(per_tar):
                wav, txt = items[(t * per_tar + u) % len(items)]
                key = f"{tag}{t:04d}U{u:05d}"
                for suffix, data in (("txt", txt.encode("utf-8")), ("wav", wav)):
                    info = tarfile.TarInfo(f"{key}.{suffix}")
                    info.size = len(data)
                    tf.addfile(info, io.BytesIO(data))
        paths.append(path)
    return paths


class CountingProxy:
    """A TCP proxy to ``port``: each request delayed by ``delay`` s, counted; bytes
    sent back counted. It runs in a process of its own (it stands for the network: its
    threads must not compete with the loader's main process for the GIL)."""

    def __init__(self, port: int, delay: float) -> None:
        import multiprocessing as mp

        self.upstream, self.delay = port, delay
        ctx = mp.get_context("fork")
        self._requests, self._bytes = ctx.Value("q", 0), ctx.Value("q", 0)
        self._srv = socket.create_server(("127.0.0.1", 0))
        self.endpoint = f"http://127.0.0.1:{self._srv.getsockname()[1]}"
        self._proc = ctx.Process(target=self._serve, daemon=True)
        self._proc.start()
        self._srv.close()  # the child serves it

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self._srv.accept()
            except OSError:
                return
            up = socket.create_connection(("127.0.0.1", self.upstream))
            threading.Thread(target=self._pump, args=(client, up, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(up, client, True), daemon=True).start()

    def _pump(self, src, dst, downstream: bool) -> None:
        try:
            while True:
                data = src.recv(1 << 16)
                if not data:
                    break
                if downstream:
                    with self._bytes.get_lock():
                        self._bytes.value += len(data)
                elif data[:4] in (b"GET ", b"HEAD", b"PUT ", b"POST"):
                    with self._requests.get_lock():
                        self._requests.value += 1
                    time.sleep(self.delay)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.close()
                except OSError:
                    pass

    def counts(self):
        return self._requests.value, self._bytes.value

    def close(self) -> None:
        self._proc.terminate()
        self._proc.join(5)


def conf_for(mode: str, cache: str, window_mb: float) -> dict:
    lconf = {"streamed": {"shard_index": False},
             "global": {"shard_index": cache},
             "window": {"shard_index": cache, "read_window_mb": window_mb}}[mode]
    return {"batch_conf": BATCH, "shuffle": True, "lhotse_conf": lconf}


def clear_spool(spool: Path) -> None:
    shutil.rmtree(spool, ignore_errors=True)
    spool.mkdir(parents=True, exist_ok=True)  # a last prefetch thread may have made it


def epoch_run(lst: str, mode: str, cache: str, window_mb: float, workers: int,
              proxy: CountingProxy, spool: Path, tar_bytes: int, total: int,
              limit: int = 0) -> dict:
    """One epoch (or its first ``limit`` utterances: bytes then per utterance read,
    scaled to the epoch)."""
    clear_spool(spool)
    _, loader = build_dataloader(lst, None, conf_for(mode, cache, window_mb), "train",
                                 dataset=Audio(), seed=1, num_workers=workers)
    r0, b0 = proxy.counts()
    t0 = time.perf_counter()
    n = 0
    first = quarter = None  # seconds to the first batch; (seconds, utterances) at 25%
    times = []  # (seconds, utterances) at each batch
    for b in loader:
        n += len(b["keys"])
        times.append((time.perf_counter() - t0, n))
        first = first if first is not None else time.perf_counter() - t0
        if quarter is None and n >= total // 4:
            quarter = (time.perf_counter() - t0, n)
        if limit and n >= limit:
            break
    wall = time.perf_counter() - t0
    r1, b1 = proxy.counts()
    steady = (round((n - quarter[1]) / (wall - quarter[0]), 1)
              if quarter is not None and wall > quarter[0] else None)
    return {"mode": mode, "workers": workers, "utts": n, "utt_per_s": round(n / wall, 1),
            "steady_utt_per_s": steady, "first_batch_s": round(first or 0.0, 2),
            "wall_s": round(wall, 1), "requests": r1 - r0,
            "fetched_over_tar_bytes": round((b1 - b0) / tar_bytes * total / n, 3),
            # the longest waits for a batch after the first: (seconds, utterances before)
            "longest_waits": sorted(((round(b[0] - a[0], 2), a[1]) for a, b in
                                     zip(times, times[1:])), reverse=True)[:3],
            "stall_s": stall_seconds(times),
            **({"partial_epoch": f"{n} of {total} utterances"} if n < total else {})}


def stall_seconds(times: list) -> float:
    """Seconds the batches after the first waited beyond 3x the median wait between
    batches (``times``: (seconds, utterances) at each batch)."""
    gaps = [b[0] - a[0] for a, b in zip(times, times[1:])]
    if not gaps:
        return 0.0
    typical = statistics.median(gaps)
    return round(sum(g - typical for g in gaps if g > 3 * typical), 2)


def fetch_alone(lst: str, paths: list, spool: Path, rounds: int) -> dict:
    """The spool alone (nothing decoding): a fresh :class:`TarSpool` prefetching every
    tar of ``lst`` (local copies ``paths``), with at most 2 spans in flight (one tar at a
    time, as before) and with :data:`STREAMS` (4); MB/s and CPU s of this process."""
    from wenet_lhotse.formats import tar_spool

    items = [[u.strip(), p.stat().st_size] for u, p in zip(open(lst), paths)]
    total = sum(n for _, n in items)
    out: dict = {}
    streams = tar_spool.STREAMS
    try:
        for _ in range(rounds):
            for n in (2, streams):
                tar_spool.STREAMS = n
                clear_spool(spool)
                sp = tar_spool.TarSpool(directory=str(spool))
                for u, _ in items:
                    sp.hold(u)
                t0, c0 = time.perf_counter(), time.process_time()
                sp.prefetch(items)
                for u, _ in items:
                    sp.wait(u)
                wall, cpu = time.perf_counter() - t0, time.process_time() - c0
                for u, _ in items:
                    sp.release(u)
                out.setdefault(f"{n} spans at once", []).append(
                    {"MB_per_s": round(total / 1e6 / wall, 1), "cpu_s": round(cpu, 2)})
    finally:
        tar_spool.STREAMS = streams
    return out


def first_and_resume(lst: str, cache: str, window_mb: float, spool: Path) -> dict:
    conf = conf_for("window", cache, window_mb)

    def make():
        return build_dataloader(lst, None, conf, "train", dataset=Audio(), seed=1,
                                num_workers=1)[1]

    clear_spool(spool)
    t0 = time.perf_counter()
    loader = make()
    it = iter(loader)
    next(it)
    first = time.perf_counter() - t0
    total = len(list(make()))  # batches per epoch
    clear_spool(spool)
    loader = make()
    it = iter(loader)
    for _ in range(int(0.9 * total) - 1):
        next(it)
    state = loader.state_dict()
    expected = next(it)["keys"]
    clear_spool(spool)
    t0 = time.perf_counter()
    fresh = make()
    fresh.load_state_dict(state)
    got = next(iter(fresh))["keys"]
    resume = time.perf_counter() - t0
    assert got == expected, "the restored loader did not continue with the next batch"
    return {"first_batch_s": round(first, 2), "resume_90pct_s": round(resume, 2),
            "batches": total}


def _stats(epochs: list, tar_of) -> dict:
    """Pair repetition between the first two epochs; spread of each tar over epoch 1."""
    pairs = [{frozenset(p) for b in e for p in combinations(sorted(b), 2)} for e in epochs]
    again = len(pairs[0] & pairs[1]) / max(1, len(pairs[1]))
    where: dict = {}
    nb = len(epochs[0])
    for i, b in enumerate(epochs[0]):
        for k in b:
            where.setdefault(tar_of(k), []).append(i / max(1, nb - 1))
    spread = sum(max(v) - min(v) for v in where.values()) / len(where)
    tars_per_batch = sum(len({tar_of(k) for k in b}) for b in epochs[0]) / nb
    return {"pairs_repeated": round(again, 4), "tar_spread": round(spread, 3),
            "tars_per_batch": round(tars_per_batch, 2), "batches": nb}


def wenet_order(tars: list, keys_of, epoch: int, shuffle_size=1500, sort_size=500,
                batch=16) -> list:
    """WeNet's order for 1 rank, 1 worker (see the module doc)."""
    rng = random.Random(epoch)
    order = list(tars)
    rng.shuffle(order)
    buf, shuffled = [], []
    for t in order:  # torchdata's Shuffler
        for k in keys_of(t):
            if len(buf) == shuffle_size:
                i = rng.randint(0, shuffle_size - 1)
                shuffled.append(buf[i])
                buf[i] = k
            else:
                buf.append(k)
    rng.shuffle(buf)
    shuffled += buf
    batches, sort_buf = [], []
    out = []
    for k in shuffled:  # WeNet's sort buffer (by length: the wav member's size)
        sort_buf.append(k)
        if len(sort_buf) >= sort_size:
            out += sorted(sort_buf, key=lambda x: x[1])
            sort_buf = []
    out += sorted(sort_buf, key=lambda x: x[1])
    for i in range(0, len(out), batch):
        batches.append([k for k, _ in out[i:i + batch]])
    return batches


def randomness(local_list: str, window_mb: float) -> dict:
    index_shards(local_list)
    out = {}
    tar_of = (lambda k: k.split("U")[0])  # noqa: E731  (the key names its tar)
    for mode in ("window", "global", "streamed"):
        conf = conf_for(mode, "auto", window_mb)
        if mode != "streamed":
            conf["lhotse_conf"]["shard_index"] = True
        _, loader = build_dataloader(local_list, None, conf, "train", dataset=Keys(), seed=1)
        epochs = [[b["keys"] for b in loader] for _ in range(2)]
        out[mode] = _stats(epochs, tar_of)
    tars = [t.strip() for t in open(local_list) if t.strip()]
    with_keys = {}
    for t in tars:
        with tarfile.open(t) as tf:
            with_keys[t] = [(m.name[:-4], m.size) for m in tf if m.name.endswith(".wav")]
    out["wenet"] = _stats([wenet_order(tars, with_keys.__getitem__, e) for e in (0, 1)],
                          tar_of)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", action="store_true", help="4 x 40 and 1 x 200 utterances")
    ap.add_argument("--tars", type=int, default=10)
    ap.add_argument("--per-tar", type=int, default=200)
    ap.add_argument("--big-tars", type=int, default=2)
    ap.add_argument("--big-per-tar", type=int, default=1040)
    ap.add_argument("--workers", type=int, nargs="*", default=[1, 2])
    ap.add_argument("--window-mb", type=float, default=None,
                    help="read_window_mb (default 64; --small: 8)")
    ap.add_argument("--delay-ms", type=float, default=20.0)
    ap.add_argument("--global-all", action="store_true")
    ap.add_argument("--global-utts", type=int, default=0,
                    help="stop each global run after this many utterances (0: the epoch)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="streamed and window epochs per row, alternating (ratio per round)")
    ap.add_argument("--sets", nargs="*", default=["19MB", "100MB"], choices=["19MB", "100MB"],
                    help="tar sets whose epochs run (the 19 MB set is written for resume "
                         "and randomness anyway)")
    ap.add_argument("--skip", nargs="*", default=[],
                    choices=["epochs", "global", "fetch", "resume", "random"])
    ap.add_argument("--workdir", default=None)
    args = ap.parse_args()
    if args.small:
        args.tars, args.per_tar, args.big_tars, args.big_per_tar = 4, 40, 1, 200
    args.window_mb = args.window_mb or (8.0 if args.small else 64.0)
    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench_s3_window_"))
    spool = work / "spool"
    os.environ["WENET_LHOTSE_SPOOL"] = str(spool)
    corpus = generate_corpus(work / "corpus", num_utterances=min(200, args.per_tar * args.tars),
                             min_duration=2.0, max_duration=4.0, seed=0)
    sets = {"19MB": write_tars(Path(corpus.root), work / "a", args.tars, args.per_tar, "A")}
    if args.big_tars:
        sets["100MB"] = write_tars(Path(corpus.root), work / "b", args.big_tars,
                                   args.big_per_tar, "B")
    out: dict = {"machine": f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}",
                 "args": vars(args),
                 "tar_mb": {k: round(sum(p.stat().st_size for p in v) / len(v) / 2**20, 1)
                            for k, v in sets.items()}}
    print(json.dumps(out), flush=True)
    import s3fs

    from tests.servers import DUMMY_CREDENTIALS, free_port, start_moto, stop

    port = free_port()
    moto = start_moto(port)
    proxy = CountingProxy(port, args.delay_ms / 1000)
    try:
        os.environ.update({**DUMMY_CREDENTIALS, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}"})
        s3fs.S3FileSystem.clear_instance_cache()
        fs = s3fs.S3FileSystem(client_kwargs={"endpoint_url": f"http://127.0.0.1:{port}"})
        fs.mkdir("bench")
        lists = {}
        for name, paths in sets.items():
            for p in paths:
                fs.put_file(str(p), f"bench/{name}/{p.name}")
            lst = work / f"{name}.s3.list"
            lst.write_text("".join(f"s3://bench/{name}/{p.name}\n" for p in paths))
            lists[name] = str(lst)
        os.environ["AWS_ENDPOINT_URL"] = proxy.endpoint
        s3fs.S3FileSystem.clear_instance_cache()
        cache = str(work / "index_cache")
        for lst in lists.values():
            index_shards(lst, cache_dir=cache)
        if "epochs" not in args.skip:
            out["epochs"] = {}
            out["ratios"] = {}
            for name, lst in lists.items():
                if name not in args.sets:
                    continue
                tar_bytes = sum(p.stat().st_size for p in sets[name])
                for workers in args.workers:
                    ratios = []
                    for rnd in range(args.rounds):
                        modes = ("streamed", "window") if rnd % 2 == 0 else ("window", "streamed")
                        if rnd == 0:
                            modes += ("global",)
                        got = {}
                        for mode in modes:
                            if mode == "global" and ("global" in args.skip or (
                                    not args.global_all and (name != "19MB" or workers != 1))):
                                continue
                            total = len(sets[name]) * (args.per_tar if name == "19MB"
                                                       else args.big_per_tar)
                            r = epoch_run(lst, mode, cache, args.window_mb, workers, proxy,
                                          spool, tar_bytes, total,
                                          args.global_utts if mode == "global" else 0)
                            r["round"], r["load"] = rnd, round(os.getloadavg()[0], 1)
                            got[mode] = r
                            out["epochs"].setdefault(name, []).append(r)
                            print(json.dumps({name: r}), flush=True)
                        ratios.append(round(got["window"]["utt_per_s"]
                                            / got["streamed"]["utt_per_s"], 3))
                    row = f"{name} x {workers} workers"
                    out["ratios"][row] = {"window_over_streamed": ratios,
                                          "median": round(statistics.median(ratios), 3)}
                    print(json.dumps({row: out["ratios"][row]}), flush=True)
        if "fetch" not in args.skip:
            out["fetch_alone"] = fetch_alone(lists["19MB"], sets["19MB"], spool,
                                             max(2, args.rounds))
            print(json.dumps({"fetch_alone": out["fetch_alone"]}), flush=True)
        if "resume" not in args.skip:
            out["window_first_and_resume"] = first_and_resume(lists["19MB"], cache,
                                                              args.window_mb, spool)
            print(json.dumps(out["window_first_and_resume"]), flush=True)
    finally:
        proxy.close()
        stop(moto)
    if "random" not in args.skip:
        local = work / "a" / "local.list"
        local.write_text("".join(f"{p}\n" for p in sets["19MB"]))
        out["randomness"] = randomness(str(local), args.window_mb)
        print(json.dumps(out["randomness"]), flush=True)
    out["machine_after"] = f"load {os.getloadavg()[0]:.1f}"
    print(json.dumps(out))


if __name__ == "__main__":
    main()
