"""Elastic mid-epoch resume (map-style loading): a state taken at a random step on W ranks
is resumed on W' ranks and/or another ``num_workers``; the rest of the epoch is re-split
over the new ranks and, over the two halves, every utterance is trained exactly once.
The state holds positions, seeds and the bucket buffer's places, not the cut list."""

from __future__ import annotations

import json
import os
import pickle
import random
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from lhotse import CutSet, MonoCut, Recording
from lhotse.audio import AudioSource

from wenet_lhotse import build_dataloader

HERE = Path(__file__).parent
N_CUTS = 150


class Keys:
    def __getitem__(self, cuts):
        return {"keys": [c.id for c in cuts]}


@pytest.fixture(scope="module")
def manifest(tmp_path_factory):
    """150 cuts of 0.2-2 s (metadata only: the dataset never reads audio)."""
    rng = random.Random(4)
    cuts = []
    for i in range(N_CUTS):
        n = rng.randrange(3200, 32000)
        rec = Recording(id=f"u{i:04d}", sources=[AudioSource("file", [0], f"/absent/{i}.wav")],
                        sampling_rate=16000, num_samples=n, duration=n / 16000)
        cuts.append(MonoCut(id=f"u{i:04d}", start=0, duration=rec.duration, channel=0,
                            recording=rec))
    path = tmp_path_factory.mktemp("elastic") / "cuts.jsonl.gz"
    CutSet.from_cuts(cuts).to_file(path)
    return path


CONF = {"batch_conf": {"batch_type": "static", "batch_size": 3}, "shuffle": True,
        "lhotse_conf": {"mode": "map", "buffer_size": 40, "num_buckets": 3}}


def _loader(manifest, ws, rank, workers=0):
    return build_dataloader(str(manifest), None, CONF, "train", dataset=Keys(), seed=5,
                            world_size=ws, rank=rank, num_workers=workers)[1]


def _first_half(manifest, ws, workers, steps):
    keys, states = [], []
    for r in range(ws):
        dl = _loader(manifest, ws, r, workers)
        it = iter(dl)
        for _ in range(steps):
            keys += next(it)["keys"]
        states.append(dl.state_dict())
    return keys, states


@pytest.mark.parametrize("old_ws,new_ws,old_workers,new_workers", [
    (2, 3, 0, 0), (2, 1, 0, 0), (1, 1, 1, 2), (3, 2, 0, 1)])
def test_elastic_resume_every_cut_once(manifest, old_ws, new_ws, old_workers, new_workers):
    steps = random.Random(old_ws * 10 + new_ws).randrange(3, N_CUTS // (3 * old_ws) - 3)
    first, states = _first_half(manifest, old_ws, old_workers, steps)
    # the same global position on every rank: any rank's state resumes any new rank
    assert all(s == states[0] for s in states)
    # O(1) in the corpus: positions and the buffer's places, no list of the epoch's cuts
    assert len(pickle.dumps(states[0])) < 20_000
    second = []
    for r in range(new_ws):
        dl = _loader(manifest, new_ws, r, new_workers)
        dl.load_state_dict(states[0])
        steps_r = [b["keys"] for b in dl]
        assert steps_r, f"rank {r} of {new_ws} got nothing"
        second.append(steps_r)
        assert dl.epoch_ledger().trained == sum(len(b) for b in steps_r)
    assert len({len(s) for s in second}) == 1  # equal steps on the new ranks
    rest = [k for s in second for b in s for k in b]
    assert len(first) + len(rest) == N_CUTS
    assert sorted(first + rest) == sorted(f"u{i:04d}" for i in range(N_CUTS))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _torchrun(nproc, *args):
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}",
           f"--master_port={_free_port()}", "--master_addr=127.0.0.1",
           str(HERE / "ddp_elastic.py"), *map(str, args)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


@pytest.mark.slow
def test_elastic_resume_torchrun_two_then_three_ranks(manifest, tmp_path):
    _torchrun(2, "first", manifest, tmp_path, 7)
    _torchrun(3, "rest", manifest, tmp_path, 0)
    first = [k for r in range(2) for k in json.loads((tmp_path / f"first{r}.json").read_text())]
    rest = [json.loads((tmp_path / f"rest{r}.json").read_text()) for r in range(3)]
    assert len(first) == 2 * 7 * 3
    assert len({len(r) for r in rest}) == 1  # same number of steps on the 3 new ranks
    keys = first + [k for r in rest for b in r for k in b]
    assert sorted(keys) == sorted(f"u{i:04d}" for i in range(N_CUTS))
