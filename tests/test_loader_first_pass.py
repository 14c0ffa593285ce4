"""``lhotse_conf.index_first_pass``: a shard list without an index is streamed in epoch 0,
which writes the index as it reads (the bytes ``wenet-lhotse index`` writes); epochs 1
and 2 sample through it. Real tars from the corpus generator, one of them cut short;
one process (0 and 2 workers) and real torchrun (gloo, 2 ranks x 2 workers), a resume
from a state saved mid-epoch 1 on another world size, a restart mid-epoch 0, tars on S3
(moto), and WeNet's own train.py through the drop-in (2 ranks, torch_ddp)."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import torch

from wenet_lhotse import build_dataloader
from wenet_lhotse.convert.index import index_shards
from wenet_lhotse.corpus import generate_corpus
from wenet_lhotse.formats.index_fragments import FRAGMENTS
from wenet_lhotse.text import CharTokenizer

HERE = Path(__file__).parent
DAMAGED = 3  # the tar cut short, in its 2nd utterance's audio


class Keys:
    def __getitem__(self, cuts):
        return {"keys": [c.id for c in cuts]}


def _conf(**lconf):
    return {"batch_conf": {"batch_type": "static", "batch_size": 3},
            "lhotse_conf": {"fault_tolerant": True, "num_buckets": 2, "equal_steps": False,
                            "index_first_pass": True, **lconf}}


def _damage(tar: Path) -> set:
    """Cut ``tar`` inside its 2nd utterance's audio; returns the keys lost."""
    with tarfile.open(tar) as t:
        members = t.getmembers()
    wavs = [m for m in members if m.name.endswith(".wav")]
    cut = wavs[1].offset_data + wavs[1].size // 2
    tar.write_bytes(tar.read_bytes()[:cut])
    return {m.name.rpartition(".")[0] for m in members if m.offset_data + m.size > cut}


@pytest.fixture()
def corpus(tmp_path):
    """41 utterances in 11 tars of 4 (the last 1); tar 3 cut short."""
    c = generate_corpus(tmp_path / "c", num_utterances=41, min_duration=0.3,
                        max_duration=1.0, shard_size=4, seed=11)
    tars = c.shards_list.read_text().split()
    lost = _damage(Path(tars[DAMAGED]))
    assert 0 < len(lost) < 4
    return {"list": c.shards_list, "units": c.units, "tars": tars,
            "readable": set(c.keys) - lost, "index": Path(str(c.shards_list) + ".index")}


def _reference(corpus, tmp_path) -> bytes:
    """What ``wenet-lhotse index`` writes for the same list."""
    ref = tmp_path / "ref.index"
    index_shards(str(corpus["list"]), out=str(ref), full=True)
    return ref.read_bytes()


def _loader(corpus, workers=0, **kw):
    return build_dataloader(str(corpus["list"]), CharTokenizer(corpus["units"]), _conf(),
                            "train", dataset=Keys(), seed=5, num_workers=workers, **kw)[1]


@pytest.mark.parametrize("workers", [0, 2])
def test_first_epoch_streams_and_writes_the_index(corpus, tmp_path, workers):
    loader = _loader(corpus, workers)
    fragments = Path(str(corpus["index"]) + FRAGMENTS)
    modes, skipped = [], []
    for epoch in range(3):
        keys = [k for b in loader for k in b["keys"]]
        assert sorted(keys) == sorted(corpus["readable"]), epoch  # each once
        led = loader.epoch_ledger()
        assert (led.epoch, led.trained, led.left_over) == (epoch, len(keys), 0)
        modes.append(loader.mode)
        skipped.append(led.skipped)
        if epoch == 0:
            assert not corpus["index"].exists()
            # every tar, the damaged one too, recorded by the reader as it streamed
            assert sorted(int(p.stem) for p in fragments.iterdir()) == list(
                range(1, len(corpus["tars"]) + 1))
            # one tar not read to its end (as an early stop leaves it): the indexer reads it
            (fragments / "5.json").unlink()
            # one touched since it was read (its fragment is stale): read again
            os.utime(corpus["tars"][7], ns=(10**18, 10**18))
    assert modes == ["streamed", "map", "map"]
    assert skipped == [1, 1, 1]  # the cut-short tar, counted in every epoch
    assert not fragments.exists()
    assert corpus["index"].read_bytes() == _reference(corpus, tmp_path)
    restart = _loader(corpus, workers)  # a new run finds the index: epoch 0 through it
    keys = [k for b in restart for k in b["keys"]]
    led = restart.epoch_ledger()
    assert (restart.mode, led.epoch, led.skipped) == ("map", 0, 1)
    assert sorted(keys) == sorted(corpus["readable"])


def test_refused_in_one_line_where_it_cannot_apply(corpus):
    for lconf, words in (({"mode": "streamed"}, "mode 'auto'"),
                         ({"shard_index": False}, "shard_index")):
        conf = _conf(**lconf)
        with pytest.raises(ValueError, match="lhotse_conf.index_first_pass") as err:
            build_dataloader(str(corpus["list"]), CharTokenizer(corpus["units"]), conf,
                             "train", dataset=Keys())
        assert words in str(err.value) and "\n" not in str(err.value)


def test_state_of_epoch_0_resumes_streamed_and_later_ones_through_the_index(corpus):
    loader = _loader(corpus)
    it = iter(loader)
    first = [k for _ in range(3) for k in next(it)["keys"]]
    state = loader.state_dict()
    assert state["mode"] == "streamed"
    again = _loader(corpus)  # a restart mid-epoch 0: streamed, the same world size
    again.load_state_dict(state)
    rest = [k for b in again for k in b["keys"]]
    assert sorted(first + rest) == sorted(corpus["readable"])
    end_of_0 = again.state_dict()
    assert (end_of_0["mode"], end_of_0["epoch"]) == ("streamed", 1)
    assert not corpus["index"].exists()
    later = _loader(corpus)  # an epoch-end state: the index is written, epoch 1 through it
    later.load_state_dict(end_of_0)
    keys = [k for b in later for k in b["keys"]]
    assert (later.mode, later.epoch_ledger().epoch) == ("map", 1)
    assert sorted(keys) == sorted(corpus["readable"])
    assert corpus["index"].exists()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_ranks_two_workers_then_resume_on_three(corpus, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    equal = tmp_path / "equal" / "shards.list"  # the same tars, its own index
    equal.parent.mkdir()
    equal.write_text(corpus["list"].read_text())
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
           f"--master_port={_free_port()}", "--master_addr=127.0.0.1",
           str(HERE / "ddp_first_pass.py"), str(corpus["list"]), str(equal),
           str(corpus["units"]), str(out)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]
    # every tar recorded by the rank and worker that streamed it (2 were then removed:
    # the ranks indexed those two themselves, split between them)
    assert [r["recorded"] for r in ranks] == [list(range(1, len(corpus["tars"]) + 1))] * 2
    for epoch in range(3):
        got = [r["epochs"][epoch] for r in ranks]
        assert [g["mode"] for g in got] == ["streamed" if epoch == 0 else "map"] * 2
        keys = [k for g in got for k in g["keys"]]
        assert sorted(keys) == sorted(corpus["readable"]), epoch  # each once, over ranks
        leds = [g["ledger"] for g in got]
        assert [(x["epoch"], x["rank"], x["world_size"]) for x in leds] == [
            (epoch, 0, 2), (epoch, 1, 2)]
        assert sum(x["skipped"] for x in leds) == 1, (epoch, leds)
        assert sum(x["trained"] for x in leds) == len(corpus["readable"])
        if epoch:  # the indexed path: the same number of steps on every rank
            assert leds[0]["steps"] == leds[1]["steps"]
    assert corpus["index"].read_bytes() == _reference(corpus, tmp_path)
    for epoch, mode in enumerate(("streamed", "map")):  # equal steps
        got = [r["equal"][epoch] for r in ranks]
        assert [g["mode"] for g in got] == [mode] * 2
        keys = [k for g in got for k in g["keys"]]
        leds = [g["ledger"] for g in got]
        assert len(keys) == len(set(keys)) and set(keys) <= corpus["readable"]
        assert leds[0]["steps"] == leds[1]["steps"]
        assert sum(x["trained"] + x["left_over"] for x in leds) == len(corpus["readable"])
        assert sum(x["skipped"] for x in leds) == 1, (epoch, leds)
    assert Path(str(equal) + ".index").read_bytes() == _reference({"list": equal}, tmp_path)
    # a state saved after 2 batches of epoch 1 on 2 ranks resumes on 3 (the index exists)
    states = [torch.load(out / f"state{r}.pt") for r in range(2)]
    assert states[0] == states[1] and states[0]["mode"] == "map"
    before = [k for r in ranks for k in r["before_state"]]
    rest = []
    for rank in range(3):
        loader = _loader(corpus, world_size=3, rank=rank)
        loader.load_state_dict(states[0])
        rest += [k for b in loader for k in b["keys"]]
        assert loader.epoch_ledger().epoch == 1
    assert sorted(before + rest) == sorted(corpus["readable"])


def test_tars_on_s3(corpus, s3, tmp_path):
    """Tars as objects (moto's server): the fragments carry the bytes' fingerprint and
    the ETag as the command records them; epoch 1 reads by offset through the index."""
    fs = s3.fs()
    urls = []
    for t in corpus["tars"]:
        fs.put_file(t, f"{s3.bucket}/shards/{Path(t).name}")
        urls.append(s3.url(f"shards/{Path(t).name}"))
    remote = tmp_path / "s3.list"
    remote.write_text("".join(u + "\n" for u in urls))
    corpus = {**corpus, "list": remote, "index": Path(str(remote) + ".index")}
    loader = _loader(corpus)
    for epoch, mode in enumerate(("streamed", "map")):
        keys = [k for b in loader for k in b["keys"]]
        assert (loader.mode, loader.epoch_ledger().skipped) == (mode, 1)
        assert sorted(keys) == sorted(corpus["readable"]), epoch
        if epoch == 0:  # recorded as streamed, not read again
            fragments = Path(str(corpus["index"]) + FRAGMENTS)
            assert len(list(fragments.glob("*.json"))) == len(urls)
    assert corpus["index"].read_bytes() == _reference(corpus, tmp_path)


def test_indexed_resume_of_a_later_epoch_counts_the_skip_once(corpus, tmp_path):
    """Without the first pass too: a state of epoch 1 loaded into a new indexed loader
    (building it reads epoch 0's first cuts for the bucket edges, the cut-short tar's
    skip among them) counts that skip once in epoch 1."""
    index_shards(str(corpus["list"]))
    conf = {**_conf(), "lhotse_conf": {**_conf()["lhotse_conf"], "index_first_pass": False}}

    def loader():
        return build_dataloader(str(corpus["list"]), CharTokenizer(corpus["units"]), conf,
                                "train", dataset=Keys(), seed=5)[1]

    first = loader()
    assert sum(1 for _ in first) and first.epoch_ledger().skipped == 1
    later = loader()
    later.load_state_dict(first.state_dict())  # the start of epoch 1
    keys = [k for b in later for k in b["keys"]]
    led = later.epoch_ledger()
    assert (later.mode, led.epoch, led.skipped) == ("map", 1, 1)
    assert sorted(keys) == sorted(corpus["readable"])


@pytest.mark.slow
def test_wenet_train_py_under_torch_ddp(tmp_path, wenet_root):
    """WeNet's own train.py (the drop-in module, 2 gloo ranks, torch_ddp's uneven steps
    joined): epoch 0 streamed, epochs 1 and 2 through the index it wrote."""
    from wenet_harness.runs import run_train, speaker_table, write_config

    c = generate_corpus(tmp_path / "c", num_utterances=40, min_duration=0.3,
                        max_duration=0.9, shard_size=7, seed=8)
    cv = tmp_path / "cv.list"  # the same tars, evaluated (streamed) after each epoch
    cv.write_text(c.shards_list.read_text())
    conf = write_config(tmp_path / "c.yaml", c.units, speaker_table(c.data_list,
                                                                    tmp_path / "spk.txt"),
                        {"batch_conf": {"batch_type": "static", "batch_size": 4},
                         "lhotse_conf": {"index_first_pass": True}}, max_epoch=3)
    res = run_train("module", conf, [c.shards_list], cv, tmp_path / "run", data_type="shard",
                    nproc=2, record_keys=tmp_path / "keys")
    assert res.returncode == 0, res.stdout[-4000:]
    batches = [json.loads(ln) for r in range(2) for ln in
               (tmp_path / "keys" / f"keys_rank{r}.jsonl").read_text().splitlines()]
    for epoch in range(3):
        keys = [k for b in batches if b["epoch"] == epoch for k in b["keys"]]
        assert sorted(keys) == sorted(c.keys), epoch  # each once over the 2 ranks
        modes = re.findall(rf"train epoch {epoch} rank \d/2 \((\w+)\)", res.stdout)
        assert modes == ["streamed" if epoch == 0 else "map"] * 2, res.stdout[-3000:]
    assert Path(str(c.shards_list) + ".index").exists()
