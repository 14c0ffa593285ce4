"""sources.window_order (+ index_reader, formats.tar_spool, sources.window_reads): the
window order of an indexed epoch (``lhotse_conf.read_window_mb``): every utterance
exactly once, mid-epoch and elastic resume, windows that hold to their byte budget,
and remote tars fetched whole at most once per epoch (bytes counted at a proxy in front
of moto's S3 server, and at a real HTTP server); the spool's holds and trimmed copies."""

from __future__ import annotations

import os
import re
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import pytest
from lhotse import CutSet
from loader_common import Audio

from wenet_lhotse.convert.index import index_shards
from wenet_lhotse.formats import read_raw_list, read_shard_list, write_wenet_shards
from wenet_lhotse.loader.build import build_dataloader
from wenet_lhotse.loader.dataloader import MapDataLoader
from wenet_lhotse.sources.indexed_shards import IndexReader, open_shard_index
from wenet_lhotse.sources.window_order import WindowPlan, window_buffer_size, windows_of

WINDOW_MB = 0.4  # two or three of the fixture's tars (about 150 kB each)
CONF = {"batch_conf": {"batch_type": "static", "batch_size": 2}, "shuffle": True,
        "lhotse_conf": {"num_buckets": 3, "read_window_mb": WINDOW_MB}}


class Keys:
    def __getitem__(self, cuts):
        return {"keys": [c.id for c in cuts]}


def _audio_epoch_matches_local(shards, base: str, tmp_path, start: Callable[[], None],
                               **lconf) -> MapDataLoader:
    """One epoch of the fixture's tars served under ``base`` (indexed into a cache, two
    workers, ``lconf`` added to the lhotse_conf): every cut's audio as read locally.
    ``start`` runs just before the epoch (clears the caller's request log, so that
    indexing is not counted). Returns the loader."""
    lst = tmp_path / "remote.list"
    lst.write_text("".join(f"{base}/{Path(t).name}\n" for t in shards["tars"]))
    cache = str(tmp_path / "cache")
    index_shards(str(lst), cache_dir=cache)
    conf = {**CONF, "lhotse_conf": {**CONF["lhotse_conf"], "shard_index": cache, **lconf}}
    _, loader = build_dataloader(str(lst), None, conf, dataset=Audio(), num_workers=2)
    expected = {c.id: c.load_audio() for c in read_shard_list(shards["list"])}
    start()
    got = {}
    for batch in loader:
        got.update({k: v for k, v in batch.items() if k != "kind"})  # mixed by batch: its source
    assert sorted(got) == sorted(expected)
    assert all(np.array_equal(got[k], expected[k]) for k in expected)
    return loader


@pytest.fixture
def shards(corpus, tmp_path):
    """The 20 utterances in 7 tars of <= 3, indexed."""
    cuts = CutSet.from_cuts(list(read_raw_list(corpus.data_list)))
    lst = write_wenet_shards(cuts, tmp_path / "shards", shard_size=3,
                             list_path=tmp_path / "shards.list")
    index_shards(str(lst))
    return {"list": str(lst), "ids": sorted(c.id for c in cuts),
            "tars": sorted(str(p) for p in (tmp_path / "shards").glob("*.tar"))}


def test_windows_hold_their_budget_and_permute_only_within():
    assert windows_of([5, 5, 5, 20, 1, 1], 10).tolist() == [2, 3, 4, 6]
    counts = [3, 1, 4, 2, 5]
    plan = WindowPlan(counts, [4, 4, 4, 4, 4], 8, seed=1, epoch=2)
    assert plan.ends.tolist() == [4, 10, 15]
    seen = []
    for w in range(3):
        rows = plan.rows(w)
        assert {u for u, _ in rows} == set(plan.units(w))
        seen += rows
    assert sorted(seen) == [(u, r) for u, c in enumerate(counts) for r in range(c)]
    other = WindowPlan(counts, [4, 4, 4, 4, 4], 8, seed=1, epoch=3)
    assert [other.rows(w) for w in range(3)] != [plan.rows(w) for w in range(3)]


def test_reader_positions_are_arithmetic_and_each_row_once(shards):
    parts = open_shard_index([shards["list"]], "auto")
    reader = IndexReader(parts, shuffle=True, seed=4, window_bytes=int(WINDOW_MB * 2**20))
    reader.set_epoch(1)
    full = [(p, c.id) for p, c in reader.iter_from(0)]
    assert [p for p, _ in full] == list(range(20))
    assert sorted(k for _, k in full) == shards["ids"]
    assert len(reader._plan.ends) >= 3  # several windows
    for start in (0, 7, 19):  # a restart anywhere continues the same order
        assert [(p, c.id) for p, c in reader.iter_from(start)] == full[start:]
    raw = reader.read_raw(set(range(20)))
    assert [raw[p].id for p in range(20)] == [k for _, k in full]
    # the utterances of one tar stay within their window
    ends = reader._plan.ends.tolist()
    tar_of = {c.id: c.materialize().custom["shard_tar"] for _, c in reader.iter_from(0)}
    for w, end in enumerate(ends):
        begin = ends[w - 1] if w else 0
        inside = {tar_of[k] for _, k in full[begin:end]}
        outside = {tar_of[k] for _, k in full[:begin] + full[end:]}
        assert not inside & outside


def _loader(source, ws=1, rank=0, workers=0, seed=5):
    return build_dataloader(source, None, CONF, "train", dataset=Keys(), seed=seed,
                            world_size=ws, rank=rank, num_workers=workers)[1]


def test_every_utterance_once_per_epoch_and_mid_epoch_resume(shards):
    loader = _loader(shards["list"], workers=1)
    assert isinstance(loader, MapDataLoader)
    epochs = []
    for _ in range(2):
        keys = [k for b in loader for k in b["keys"]]
        assert sorted(keys) == shards["ids"]
        assert loader.epoch_ledger().trained == 20
        epochs.append(keys)
    assert epochs[0] != epochs[1]
    ref = _loader(shards["list"])
    it = iter(ref)
    head = [next(it)["keys"] for _ in range(4)]
    state = ref.state_dict()
    rest = [b["keys"] for b in it]
    fresh = _loader(shards["list"], workers=1)
    fresh.load_state_dict(state)
    assert [b["keys"] for b in fresh] == rest
    assert sorted(k for b in head + rest for k in b) == shards["ids"]


@pytest.mark.parametrize("old_ws,new_ws", [(2, 3), (3, 1)])
def test_elastic_resume_with_the_window_order(shards, old_ws, new_ws):
    first, states = [], []
    for r in range(old_ws):
        dl = _loader(shards["list"], old_ws, r)
        it = iter(dl)
        first += [k for _ in range(2) for k in next(it)["keys"]]
        states.append(dl.state_dict())
    assert all(s == states[0] for s in states)
    second = []
    for r in range(new_ws):
        dl = _loader(shards["list"], new_ws, r)
        dl.load_state_dict(states[0])
        second.append([b["keys"] for b in dl])
    assert len({len(s) for s in second}) == 1  # equal steps
    assert sorted(first + [k for s in second for b in s for k in b]) == shards["ids"]


@pytest.mark.slow
@pytest.mark.parametrize("mix_by", ["cut", "batch"])
def test_remote_tars_are_fetched_about_once_per_epoch(shards, s3_proxy, tmp_path,
                                                      monkeypatch, mix_by):
    """Also mixed by batch (each speech source's own bucketing sampler, its buffer held
    to about one window as when mixing by cut)."""
    s3, proxy = s3_proxy
    monkeypatch.setenv("WENET_LHOTSE_SPOOL", str(tmp_path / "spool"))
    monkeypatch.setenv("WENET_LHOTSE_RANGE_CACHE_MB", "0")  # no block cache to hide reads
    requests = []
    pump = proxy._pump

    def counting(src, dst, downstream):  # (path, Range) of every GET, bytes asked
        if downstream:
            return pump(src, dst, downstream)

        class Peek:
            def recv(self, n):
                data = src.recv(n)
                m = re.match(rb"GET (\S+) ", data)
                if m:
                    rng = re.search(rb"[Rr]ange: bytes=(\d+)-(\d+)", data)
                    requests.append((m.group(1).decode().split("?")[0],
                                     int(rng.group(2)) - int(rng.group(1)) + 1 if rng
                                     else None))
                return data

            def __getattr__(self, name):
                return getattr(src, name)

        return pump(Peek(), dst, downstream)

    proxy._pump = counting
    base = s3.put_dir(Path(shards["tars"][0]).parent, "shards")
    loader = _audio_epoch_matches_local(shards, base, tmp_path, requests.clear,
                                        mix_by=mix_by)
    if mix_by == "batch":
        speech = loader.sampler.sampler.samplers[0]
        assert speech.buffer_size == window_buffer_size(
            {0: open_shard_index([str(tmp_path / "remote.list")], str(tmp_path / "cache"))},
            WINDOW_MB, 20_000) < len(shards["ids"])
    fetched = {}
    for path, n in requests:
        name = path.rsplit("/", 1)[-1]
        if name.endswith(".tar"):
            fetched[name] = fetched.get(name, 0) + (n or 0)
    sizes = {Path(t).name: os.path.getsize(t) for t in shards["tars"]}
    assert set(fetched) == set(sizes)
    # each tar read whole at most once (the two workers share the spool, the sampling
    # process fetches) ...
    whole = [name for path, n in requests for name in [path.rsplit("/", 1)[-1]]
             if name in sizes and n == sizes[name]]
    assert len(whole) == len(set(whole)) >= len(sizes) - 2, requests
    # ... plus member ranges of copies let go over the keeper's budget (a window here is
    # 2-3 tiny tars); at real sizes 1.00-1.02x (bench/s3_window.py)
    assert sum(fetched.values()) / sum(sizes.values()) < 2.0, requests


def test_spool_copy_lives_while_held_and_trims_to_waiting_members(shards, tmp_path):
    """formats.tar_spool: two holders of one copy (two ranks of a node); a copy cut down
    to the members still waiting keeps their offsets; the last release removes it."""
    import tarfile

    from wenet_lhotse.formats.member_reads import read_members
    from wenet_lhotse.formats.tar_spool import TarSpool

    tar = shards["tars"][0]
    url = "s3://bucket/" + Path(tar).name
    with tarfile.open(tar) as tf:
        members = [(m.name, m.offset_data, m.size) for m in tf if m.isfile()]
    a, b = TarSpool(directory=str(tmp_path / "spool")), TarSpool(directory=str(tmp_path / "spool"))
    a.hold(url)
    b.hold(url)
    assert a.held(url) and a.local(url) is None  # held: a reader waits for the copy
    Path(a.path(url)).write_bytes(Path(tar).read_bytes())  # as a fetch leaves it
    keep, drop = members[:1], members[1:]
    kept = a.trim(url, [(o - 512, n + 512) for _, o, n in keep])
    assert kept == sum(n + 512 for _, _, n in keep)
    assert os.path.getsize(a.path(url)) == os.path.getsize(tar)  # same offsets (sparse)
    got = read_members(a.path(url), keep + drop)
    assert got[keep[0][0]] == Path(tar).read_bytes()[keep[0][1]:keep[0][1] + keep[0][2]]
    assert all(not isinstance(got[name], bytes) for name, _, _ in drop)  # not kept: named
    a.release(url)
    assert b.local(url) is not None  # b still holds it
    b.release(url)
    assert b.local(url) is None and not b.held(url) and b.wait(url) is None


@pytest.mark.slow
def _recording(seen: list, most: Optional[list] = None, delay_s: float = 0.0) -> type:
    """An HTTP handler class (ranges served) that appends ``(tar, first byte, bytes
    asked)`` of every ranged GET to ``seen``, answers each after ``delay_s`` and keeps
    in ``most[0]`` the most requests answered at once."""
    from conftest import AdversarialHandler

    inflight = [0]

    class Recording(AdversarialHandler):
        def do_GET(self):
            m = re.match(r"bytes=(\d+)-(\d+)", self.headers.get("Range") or "")
            if m:
                seen.append((self.path.rsplit("/", 1)[-1], int(m.group(1)),
                             int(m.group(2)) - int(m.group(1)) + 1))
            inflight[0] += 1
            if most is not None:
                most[0] = max(most[0], inflight[0])
            time.sleep(delay_s)
            try:
                return super().do_GET()
            finally:
                inflight[0] -= 1

    return Recording


def test_http_tars_are_fetched_whole_at_most_once(shards, http_serve, tmp_path, monkeypatch):
    """The spool on HTTP (a real server on 127.0.0.1): every cut's audio as read
    locally, and no tar fetched whole twice in an epoch."""
    monkeypatch.setenv("WENET_LHOTSE_SPOOL", str(tmp_path / "spool"))
    monkeypatch.setenv("WENET_LHOTSE_RANGE_CACHE_MB", "0")
    seen = []  # (tar, first byte, bytes asked) of every ranged GET
    base = http_serve(Path(shards["tars"][0]).parent, handler_class=_recording(seen),
                      mode="ranges")
    _audio_epoch_matches_local(shards, base, tmp_path, seen.clear)
    sizes = {Path(t).name: os.path.getsize(t) for t in shards["tars"]}
    whole = [name for name, start, n in seen if start == 0 and n == sizes[name]]
    assert len(whole) == len(set(whole)) >= len(sizes) - 2, seen
    assert sum(n for _, _, n in seen) / sum(sizes.values()) < 2.0, seen


def test_spool_fetches_tars_in_order_several_at_once_in_spans(shards, http_serve, tmp_path,
                                                              monkeypatch):
    """formats.tar_spool: tars prefetched several at once, their spans read in the order
    the tars were asked (the window being read before the next) and at most STREAMS at
    once, each tar's copy equal to the tar and every byte requested once; a large tar in
    more spans of several pieces; a span cut short (a tar shorter than indexed) leaves a
    copy as long as the bytes that came."""
    from wenet_lhotse.formats import tar_spool

    monkeypatch.setattr(tar_spool, "PIECE", 1 << 20)  # one piece per span: 2 spans a tar
    monkeypatch.setattr(tar_spool, "MIN_SPAN", 1 << 14)
    granted = []  # span keys (ask, span) in the order their turns came
    reading = [0, 0]  # spans reading now, the most at once (the spool's own count)

    class Turns(tar_spool._Turns):
        def _next(self, key):
            ok = super()._next(key)
            if ok:
                granted.append(key)
            return ok

        @contextmanager
        def turn(self, key):
            with super().turn(key):
                with self.cv:
                    reading[0] += 1
                    reading[1] = max(reading[1], reading[0])
                try:
                    yield
                finally:
                    with self.cv:
                        reading[0] -= 1

    monkeypatch.setattr(tar_spool, "_Turns", Turns)
    seen = []  # (tar, first byte, bytes asked) of every ranged GET
    most = [0]  # the most requests answered at once
    # a slow server: the spans' requests overlap
    base = http_serve(Path(shards["tars"][0]).parent,
                      handler_class=_recording(seen, most, delay_s=0.1), mode="ranges")
    tars = shards["tars"][:3]
    names = [Path(t).name for t in tars]
    sizes = [os.path.getsize(t) for t in tars]
    assert [tar_spool.spans_of(n) for n in sizes] == [2, 2, 2]
    spool = tar_spool.TarSpool(directory=str(tmp_path / "spool"))
    urls = [f"{base}/{n}" for n in names]
    for u in urls:
        spool.hold(u)
    spool.prefetch([[u, n] for u, n in zip(urls, sizes)])
    for u, t in zip(urls, tars):
        assert Path(spool.wait(u)).read_bytes() == Path(t).read_bytes()
    # turns in the order asked, whichever thread came first; two tars' spans at once
    # (4 in flight, each tar has 2), never more. The server's own count may see one
    # more: a handler counts its request done only after the client has its bytes and
    # the next span has started.
    assert granted == [(a, i) for a in range(3) for i in range(2)]
    assert reading[1] == tar_spool.STREAMS == 4 <= most[0]
    assert names[2] not in [t for t, _, _ in seen[:4]]  # the third tar waited its turn
    for name, size in zip(names, sizes):
        asked = sorted((s, n) for t, s, n in seen if t == name)
        ends = [min(s + n, size) for s, n in asked]  # the server sends up to the end
        assert [s for s, _ in asked] == [0] + ends[:-1] and ends[-1] == size, asked  # once
        assert -(-size // 2) in [s for s, _ in asked]  # the second span's first request
    # a large file (8 pieces and a bit): 4 spans (STREAMS), each in pieces of at most
    # PIECE (and at least 64 KiB, the HTTP reader's smallest request)
    monkeypatch.setattr(tar_spool, "PIECE", 1 << 17)
    big = Path(tars[0]).parent / "big.bin"
    big.write_bytes(os.urandom(8 * tar_spool.PIECE + 1000))
    size = os.path.getsize(big)
    assert tar_spool.spans_of(size) == 4
    seen.clear()
    url = f"{base}/{Path(big).name}"
    spool.hold(url)
    assert Path(spool.fetch(url, size)).read_bytes() == Path(big).read_bytes()
    asked = sorted((s, n) for _, s, n in seen)
    ends = [min(s + n, size) for s, n in asked]
    # once: each request starts where the one before ended (HTTP pieces are whole
    # blocks: a span's last may ask a byte or two of the next span's)
    starts = [s for s, _ in asked]
    assert starts[0] == 0 and ends[-1] == size, asked
    assert all(0 <= e - s < 3 for e, s in zip(ends, starts[1:])), asked
    assert max(n for _, n in asked) <= tar_spool.PIECE and len(asked) > 4
    step = -(-size // 4)
    assert {0, step, 2 * step, 3 * step} <= {s for s, _ in asked}
    short = f"{base}/{names[0]}"  # asked for more than the tar holds
    spool.release(short)
    spool.hold(short)
    got = spool.fetch(short, 3 * sizes[0])  # a later span finds no bytes
    assert Path(got).read_bytes() == Path(tars[0]).read_bytes()


def test_spool_turns_wait_for_a_tar_asked_earlier():
    """formats.tar_spool: a span of a later tar does not take a free turn while a tar
    asked before it has not begun its spans, nor while a tar of the first window is
    being read; it does once that tar has its turn, or has been read."""
    import threading

    from wenet_lhotse.formats.tar_spool import _Turns

    turns = _Turns(2)
    turns.expect(0)
    turns.expect(1)
    turns.begin([(1, 0)])
    took = threading.Event()

    def later():
        with turns.turn((1, 0)):
            took.set()

    t = threading.Thread(target=later)
    t.start()
    assert not took.wait(0.3)  # ask 0 is pending: a free turn is not taken past it
    turns.begin([(0, 0)])
    with turns.turn((0, 0)):
        assert took.wait(5)  # the second turn, after ask 0 took the first
    t.join(5)
    turns.expect(2)
    turns.drop(2)  # fetched elsewhere: nothing waits for it
    turns.begin([(3, 0)])
    with turns.turn((3, 0)):
        assert turns.free == 1
    # a first window goes alone: a later tar's span waits, turns free, until it is read
    turns.expect(4, first=True)
    turns.expect(5)
    turns.begin([(4, 0)])
    turns.begin([(5, 0)])
    took.clear()

    def after():
        with turns.turn((5, 0)):
            took.set()

    t = threading.Thread(target=after)
    with turns.turn((4, 0)):
        t.start()
        assert not took.wait(0.3) and turns.free == 1
    assert took.wait(5)
    t.join(5)
    assert turns.free == 2 and not turns.first and not turns.left
    # ... also while another process fetches it (a claim waited for), until dropped
    turns.expect(6, first=True)
    turns.expect(7)
    turns.elsewhere(6)
    turns.begin([(7, 0)])
    took.clear()

    def last():
        with turns.turn((7, 0)):
            took.set()

    t = threading.Thread(target=last)
    t.start()
    assert not took.wait(0.3)
    turns.drop(6)  # its copy came
    assert took.wait(5)
    t.join(5)
