"""Every readable utterance exactly once per epoch on streamed tar shards under real DDP
(torchrun, gloo): 2, 3 and 4 ranks x 1 and 2 DataLoader workers, tars of 3-47 utterances,
with and without a damaged tar, a filter that removes some utterances; the epoch ledger
adds up on every rank. Also the ledger in one process (map and streamed, cv)."""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Dict, List

import numpy as np
import pytest

from wenet_lhotse import build_dataloader
from wenet_lhotse.formats.audio import encode_pcm16_wav

HERE = Path(__file__).parent

#: utterances per tar: uneven, 3 to 47
TAR_SIZES = [3, 47, 5, 30, 8, 12, 41, 3, 19, 26, 7, 35, 4, 15]
RATE = 16000


def _samples(i: int) -> int:
    """Lengths well clear of the filter's edges (10 and 40 frames of 10 ms): every 5th
    utterance too short, every 7th too long, the rest kept."""
    if i % 5 == 0:
        return 900 + i % 300           # < 0.1 s: too_short
    if i % 7 == 0:
        return 7000 + i % 500          # > 0.4 s: too_long
    return 2000 + (i * 37) % 4000      # 0.125 .. 0.375 s: kept


def _write_tar(path: Path, items: List[tuple]) -> Dict[str, int]:
    """WeNet's make_shard_list.py layout (key.txt, then key.wav); returns the end offset
    of each key's wav member in the tar (bytes)."""
    ends = {}
    with tarfile.open(path, "w") as tar:
        for key, n in items:
            for name, data in ((f"{key}.txt", b"ab"),
                               (f"{key}.wav", encode_pcm16_wav(
                                   np.full(n, 0.01, dtype=np.float32), RATE))):
                info = tarfile.TarInfo(name)
                info.size, info.mtime = len(data), 0
                tar.addfile(info, io.BytesIO(data))
            ends[key] = tar.offset
    return ends


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    """14 tars (255 utterances) clean, and the same with tar 6 (41 utterances) truncated
    in the middle of its 20th wav: its first 19 utterances stay readable."""
    root = tmp_path_factory.mktemp("once")
    out: Dict[str, object] = {}
    i = 0
    tars, keep_clean, keep_damaged = [], set(), set()
    for t, size in enumerate(TAR_SIZES):
        items = [(f"T{t:02d}-U{i + j:04d}", _samples(i + j)) for j in range(size)]
        i += size
        path = root / f"shard_{t:02d}.tar"
        ends = _write_tar(path, items)
        kept = {k for k, n in items if 1600 <= n <= 6400}
        keep_clean |= kept
        if t == 6:
            cut = ends[items[19][0]] - 100  # inside the 20th utterance's wav data
            data = path.read_bytes()[:cut]
            damaged = root / "damaged_06.tar"
            damaged.write_bytes(data)
            tars.append((path, damaged))
            keep_damaged |= {k for k, n in items[:19] if 1600 <= n <= 6400}
        else:
            tars.append((path, path))
            keep_damaged |= kept
    clean_list = root / "clean.list"
    clean_list.write_text("".join(f"{a}\n" for a, _ in tars))
    damaged_list = root / "damaged.list"
    damaged_list.write_text("".join(f"{b}\n" for _, b in tars))
    readable_clean = sum(TAR_SIZES)
    readable_damaged = readable_clean - (41 - 19)
    out.update(clean=(clean_list, keep_clean, readable_clean),
               damaged=(damaged_list, keep_damaged, readable_damaged), root=root)
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _torchrun(nproc: int, configs: list, out: Path) -> list:
    out.mkdir(parents=True, exist_ok=True)
    cfg_path = out / "configs.json"
    cfg_path.write_text(json.dumps(configs))
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}",
           f"--master_port={_free_port()}", "--master_addr=127.0.0.1",
           str(HERE / "ddp_exactly_once.py"), str(cfg_path), str(out)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(nproc)]


def _check_ledger(led: dict, steps: List[List[str]]) -> None:
    assert led["trained"] == sum(len(s) for s in steps)
    assert led["steps"] == len(steps)
    assert led["total"] == led["trained"] + led["skipped"] + led["filtered"] + led["left_over"]


@pytest.mark.slow
@pytest.mark.parametrize("nproc", [2, 3, 4])
def test_every_readable_utterance_once_per_epoch(shards, tmp_path, nproc):
    configs = []
    for kind in ("clean", "damaged"):
        for workers in (1, 2):
            configs.append({"name": f"{kind}-w{workers}", "shards": str(shards[kind][0]),
                            "num_workers": workers, "equal_steps": False, "epochs": 2})
    # our own API's default for loops without a join: equal steps, leftovers counted
    configs.append({"name": "damaged-equal", "shards": str(shards["damaged"][0]),
                    "num_workers": 2, "equal_steps": True, "epochs": 1})
    ranks = _torchrun(nproc, configs, tmp_path)
    for cfg in configs:
        kind = cfg["name"].split("-")[0]
        _, expected, readable = shards[kind]
        for epoch in range(cfg["epochs"]):
            per_rank = [r[cfg["name"]][epoch] for r in ranks]
            trained = [k for r in per_rank for s in r["steps"] for k in s]
            assert len(trained) == len(set(trained)), f"{cfg['name']}: a key twice"
            for r in per_rank:
                _check_ledger(r["ledger"], r["steps"])
                assert r["ledger"]["epoch"] == epoch
            leds = [r["ledger"] for r in per_rank]
            # over the ranks: every readable utterance is trained, filtered or left over
            assert sum(x["trained"] + x["filtered"] + x["left_over"] for x in leds) == readable
            assert sum(x["skipped"] for x in leds) == (1 if kind == "damaged" else 0)
            assert sum(x["filtered"] for x in leds) == readable - len(expected)
            if cfg["equal_steps"]:
                assert len({len(r["steps"]) for r in per_rank}) == 1  # same step count
                assert set(trained) <= expected
                assert sum(x["left_over"] for x in leds) == len(expected) - len(trained) > 0
            else:
                assert set(trained) == expected  # every readable utterance, once
                assert all(x["left_over"] == 0 for x in leds)
        if kind == "damaged":
            skips = [s for r in ranks for s in r[cfg["name"]][-1]["skips"]]
            # the skip report keeps every epoch's: the damaged tar, named, once per epoch
            assert skips == [str(shards["damaged"][0].parent / "damaged_06.tar")] * cfg["epochs"]


class _Letters:
    def tokenize(self, line):
        return list(line), [1] * len(line)


class _Keys:
    def __getitem__(self, cuts):
        return {"keys": [c.id for c in cuts]}


def _conf(**lconf):
    return {"batch_conf": {"batch_type": "static", "batch_size": 5},
            "filter_conf": {"min_length": 10, "max_length": 40},
            "lhotse_conf": {"fault_tolerant": True, "duration_bins": [0.3], "num_buckets": 2,
                            **lconf}}


def test_ledger_streamed_one_process_logs_one_line(shards, caplog):
    path, expected, readable = shards["damaged"]
    _, loader = build_dataloader(str(path), _Letters(), _conf(), "train", dataset=_Keys(),
                                 seed=1)
    with caplog.at_level("INFO", logger="wenet_lhotse.loader.ledger"):
        keys = [k for b in loader for k in b["keys"]]
    assert sorted(keys) == sorted(expected)
    led = loader.epoch_ledger()
    assert (led.trained, led.skipped, led.filtered, led.left_over) == (
        len(expected), 1, readable - len(expected), 0)
    lines = [r.getMessage() for r in caplog.records if r.name == "wenet_lhotse.loader.ledger"]
    assert lines == [led.line()]
    assert f"{led.total} utterances = {len(expected)} trained" in lines[0]


class _KeysLogged(_Keys):
    """Appends one line per batch it makes (in whichever worker process)."""

    def __init__(self, log):
        self.log = log

    def __getitem__(self, cuts):
        with open(self.log, "a") as f:
            f.write("batch\n")
        return super().__getitem__(cuts)


def test_ledger_steps_per_epoch_counts_the_rest_as_left_over(shards, tmp_path):
    path, expected, readable = shards["clean"]
    log = tmp_path / "made.txt"
    _, loader = build_dataloader(str(path), _Letters(), _conf(steps_per_epoch=3), "train",
                                 dataset=_KeysLogged(log), seed=1, num_workers=1)
    keys = [k for b in loader for k in b["keys"]]
    led = loader.epoch_ledger()
    assert led.steps == 3 and led.trained == len(keys) > 0
    assert led.trained + led.left_over == len(expected)  # read on and counted
    assert led.filtered == readable - len(expected)
    # the rest was counted without the dataset (no decoding): only the 3 steps and the
    # batches already in flight (prefetch 2) were made, of the ~37 the tars hold
    assert len(log.read_text().splitlines()) <= 3 + 2 + 1 < len(expected) // 5


def test_ledger_map_mode_and_cv(shards):
    path, expected, readable = shards["clean"]
    _, loader = build_dataloader(str(path), _Letters(), _conf(mode="map"), "train",
                                 dataset=_Keys(), seed=1)
    for epoch in range(2):
        keys = [k for b in loader for k in b["keys"]]
        led = loader.epoch_ledger()
        assert sorted(keys) == sorted(expected)
        assert (led.epoch, led.trained, led.filtered, led.left_over) == (
            epoch, len(expected), readable - len(expected), 0)
    _, cv = build_dataloader(str(path), _Letters(), _conf(), "cv", dataset=_Keys(), seed=1)
    for _ in range(2):
        n = sum(len(b["keys"]) for b in cv)
        led = cv.epoch_ledger()
        assert led.trained == n == len(expected)
        assert led.total == readable


@pytest.mark.parametrize("engine,top,equal", [
    ("torch_ddp", {}, False),                     # WeNet's executor joins uneven ranks
    ("torch_ddp", {"save_interval": 100}, True),  # dist.barrier() inside the loop
    ("deepspeed", {}, True),                      # wenet_join: monitored_barrier, no join
    ("torch_fsdp", {}, True),
])
def test_drop_in_equal_steps_follow_wenets_engine(engine, top, equal):
    from types import SimpleNamespace

    from wenet_lhotse.dropin.compat import wenet_equal_steps

    assert wenet_equal_steps(SimpleNamespace(train_engine=engine), top) is equal
