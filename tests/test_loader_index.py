"""sources.indexed_shards + loader.build: WeNet shard lists sampled through their index
(map mode, audio read by offset for emitted batches), in one process and on 2 real
DDP ranks (torchrun, gloo), through build_dataloader and WeNet's drop-in."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from lhotse import CutSet

from wenet_lhotse.convert.index import index_shards
from wenet_lhotse.errors import SkipReport
from wenet_lhotse.formats import read_raw_list, read_shard_list, write_wenet_shards
from wenet_lhotse.io.policy import ReadPolicy
from wenet_lhotse.loader.build import build_dataloader
from wenet_lhotse.loader.dataloader import MapDataLoader, StreamedDataLoader

HERE = Path(__file__).parent
CONF = {"batch_conf": {"batch_type": "dynamic", "max_frames_in_batch": 1200},
        "lhotse_conf": {"num_buckets": 3, "buffer_size": 40}}


class Audio:
    """A real map-style dataset: each cut's samples, by id."""

    def __getitem__(self, cuts):
        return {c.id: c.load_audio() for c in cuts}


@pytest.fixture
def shards(corpus, tmp_path):
    """19 utterances (an odd count) in 7 tars of <= 3, as in the DDP tests."""
    cuts = CutSet.from_cuts(list(read_raw_list(corpus.data_list))[:19])
    lst = write_wenet_shards(cuts, tmp_path / "shards", shard_size=3,
                             list_path=tmp_path / "shards.list")
    return {"list": str(lst), "cuts": cuts,
            "tars": sorted(str(p) for p in (tmp_path / "shards").glob("*.tar"))}


def _epoch(loader):
    out = {}
    for batch in loader:
        assert not set(batch) & set(out)
        out.update(batch)
    return out


def test_auto_mode_uses_the_index_and_reads_the_same_audio(shards, caplog):
    with caplog.at_level(logging.WARNING):
        _, streamed = build_dataloader(shards["list"], None, CONF, dataset=Audio(), seed=3)
        build_dataloader(shards["list"], None, CONF, dataset=Audio(), seed=3)
    assert isinstance(streamed, StreamedDataLoader)
    hints = [r.message for r in caplog.records if "wenet-lhotse index" in r.message]
    assert len(hints) == 1 and shards["list"] in hints[0]  # one line, once per process
    index_shards(shards["list"])
    _, indexed = build_dataloader(shards["list"], None, CONF, dataset=Audio(), seed=3)
    assert isinstance(indexed, MapDataLoader)
    expected = {c.id: c.load_audio() for c in read_shard_list(shards["list"])}
    for _ in range(2):  # every utterance once per epoch, the same samples as a stream
        got = _epoch(indexed)
        assert sorted(got) == sorted(expected)
        assert all(np.array_equal(got[k], expected[k]) for k in expected)
    # mode: streamed (or shard_index: false) keeps the stream
    conf = {**CONF, "lhotse_conf": {**CONF["lhotse_conf"], "shard_index": False}}
    assert isinstance(build_dataloader(shards["list"], None, conf, dataset=Audio())[1],
                      StreamedDataLoader)


def test_cv_from_an_indexed_list_is_planned_once_per_utterance(shards):
    index_shards(shards["list"])
    _, cv = build_dataloader(shards["list"], None, CONF, "cv", dataset=Audio())
    assert isinstance(cv, MapDataLoader)
    expected = {c.id: c.load_audio() for c in read_shard_list(shards["list"])}
    for _ in range(2):
        got = _epoch(cv)
        assert sorted(got) == sorted(expected)
        assert all(np.array_equal(got[k], expected[k]) for k in expected)


@pytest.mark.slow
def test_indexed_shards_on_s3_train_with_ranged_reads(shards, s3, tmp_path):
    base = s3.put_dir(Path(shards["tars"][0]).parent, "shards")
    lst = tmp_path / "s3.list"
    lst.write_text("".join(f"{base}/{Path(t).name}\n" for t in shards["tars"]))
    cache = str(tmp_path / "cache")
    index_shards(str(lst), cache_dir=cache)
    conf = {**CONF, "lhotse_conf": {**CONF["lhotse_conf"], "shard_index": cache}}
    _, loader = build_dataloader(str(lst), None, conf, dataset=Audio(), num_workers=1)
    assert isinstance(loader, MapDataLoader)
    expected = {c.id: c.load_audio() for c in read_shard_list(shards["list"])}
    got = _epoch(loader)
    assert sorted(got) == sorted(expected)
    assert all(np.array_equal(got[k], expected[k]) for k in expected)


def test_indexed_loader_resumes_mid_epoch(shards):
    index_shards(shards["list"])

    def make():
        return build_dataloader(shards["list"], None, CONF, dataset=Audio(), seed=5,
                                num_workers=1)[1]

    ref = make()
    it = iter(ref)
    [next(it) for _ in range(2)]
    state = ref.state_dict()
    rest = [sorted(b) for b in it]
    fresh = make()
    fresh.load_state_dict(state)
    assert [sorted(b) for b in fresh] == rest


def test_stale_tar_in_a_tolerant_loader_is_counted_and_the_rest_trained(shards):
    index_shards(shards["list"])
    os.remove(shards["tars"][2])
    conf = {**CONF, "lhotse_conf": {**CONF["lhotse_conf"], "fault_tolerant": True}}
    report = SkipReport()
    _, loader = build_dataloader(shards["list"], None, conf, dataset=Audio(),
                                 skip_report=report)
    assert isinstance(loader, MapDataLoader)
    assert [(i.source, i.kind) for i in report] == [(shards["tars"][2], "stale_index")]
    assert len(_epoch(loader)) == 16


def _torchrun(how: str, source: str, units, out: Path) -> list:
    out.mkdir(parents=True, exist_ok=True)
    from test_loader_ddp import _free_port

    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
           f"--master_port={_free_port()}", "--master_addr=127.0.0.1",
           str(HERE / "ddp_index.py"), how, source, str(units), str(out)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]


@pytest.mark.slow
@pytest.mark.parametrize("how", ["build", "dropin", "window"])
def test_ddp_indexed_shards_every_readable_utterance_once_equal_steps(
        shards, corpus, tmp_path, how):
    # a tar cut short before indexing (the index keeps what precedes the cut) and a tar
    # gone after indexing (a stale tar, skipped): fault-tolerant training
    with open(shards["tars"][1], "r+b") as f:
        f.truncate(os.path.getsize(shards["tars"][1]) // 2)
    index_shards(shards["list"])
    os.remove(shards["tars"][4])
    policy = ReadPolicy(strict=False, skip_report=SkipReport(log=False))
    readable = sorted(c.id for c in read_shard_list(shards["list"],
                                                    policy=policy))
    assert 12 <= len(readable) < 16
    ranks = _torchrun(how, shards["list"], corpus.units, tmp_path / how)
    assert {r["loader"] for r in ranks} == {"MapDataLoader"}
    for epoch in range(2):
        steps = [r["epochs"][epoch] for r in ranks]
        assert len(steps[0]) == len(steps[1])  # equal steps by construction
        keys = [k for s in steps for batch in s for k in batch]
        assert sorted(keys) == readable  # every readable utterance exactly once
    kinds = {kind for r in ranks for _, kind in r["skips"]}
    assert {"stale_index", "truncated"} <= kinds
