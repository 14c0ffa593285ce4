"""Real DDP (torchrun, 2 ranks, gloo on CPU) on uneven data, map-style and streamed: one
launch runs both cases (tests/ddp_loader.py), each test checks its own."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from lhotse import CutSet

from wenet_lhotse.formats import read_raw_list, write_wenet_shards

HERE = Path(__file__).parent
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def uneven(corpus, tmp_path_factory):
    """19 cuts (an odd count) as a cuts manifest and as 7 WeNet shards of <= 3 cuts."""
    root = tmp_path_factory.mktemp("ddp")
    cuts = CutSet.from_cuts(list(read_raw_list(corpus.data_list))[:19])
    manifest = root / "cuts.jsonl.gz"
    cuts.to_file(manifest)
    shards = write_wenet_shards(cuts, root / "shards", shard_size=3,
                                list_path=root / "shards.list")
    return {"cuts": cuts, "manifest": manifest, "shards": shards, "root": root}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _torchrun(cases: dict, out: Path) -> dict:
    """``{mode: (source, cv_source)}`` in one launch -> ``{mode: [rank0, rank1]}``."""
    args = []
    for mode, (source, cv_source) in cases.items():
        (out / mode).mkdir(parents=True, exist_ok=True)
        args += [mode, str(source), str(cv_source), str(out / mode)]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
           f"--master_port={_free_port()}", "--master_addr=127.0.0.1",
           str(HERE / "ddp_loader.py"), *args]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=150 * len(cases),
                          env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return {mode: [json.loads((out / mode / f"rank{r}.json").read_text()) for r in range(2)]
            for mode in cases}


@pytest.fixture(scope="module")
def launched(uneven, tmp_path_factory):
    """Both cases, map-style over the manifest and streamed over the shards, in one
    torchrun launch."""
    return _torchrun({"map": (uneven["manifest"], uneven["manifest"]),
                      "streamed": (uneven["shards"], uneven["manifest"])},
                     tmp_path_factory.mktemp("ddp_runs"))


def _check_cv(ranks, cuts):
    keys = ranks[0]["cv_keys"] + ranks[1]["cv_keys"]
    assert sorted(keys) == sorted(c.id for c in cuts)  # every cut once, no _dup copies
    assert ranks[0]["cv_keys"] and ranks[1]["cv_keys"]
    single = sum(c.duration for c in cuts) / len(cuts)
    for r in ranks:
        assert r["cv_count"] == len(cuts)
        assert r["cv_mean"] == pytest.approx(single, rel=1e-12)


def test_ddp_map_style_equal_steps_no_duplicates(uneven, launched):
    ranks = launched["map"]
    ids = sorted(c.id for c in uneven["cuts"])
    for epoch in range(2):
        steps = [r["epochs"][epoch] for r in ranks]
        assert len(steps[0]) == len(steps[1]) > 0
        seen = [k for s in steps for b in s for k in b]
        assert sorted(seen) == ids  # every cut exactly once: none lost, none twice or _dup
    # reshuffled between epochs without set_epoch
    assert ranks[0]["epochs"][0] != ranks[0]["epochs"][1]
    # each rank restored rank 0's state and continued with its own next batches
    assert all(r["resumed_ok"] for r in ranks)
    _check_cv(ranks, uneven["cuts"])


def test_ddp_streamed_equal_steps_disjoint_reads(uneven, launched):
    ranks = launched["streamed"]
    for epoch in range(2):
        steps = [r["epochs"][epoch] for r in ranks]
        assert len(steps[0]) == len(steps[1]) > 0  # no hang, same number of steps
        per_rank = [{k for b in s for k in b} for s in steps]
        assert not per_rank[0] & per_rank[1], "two ranks read the same tar"
    _check_cv(ranks, uneven["cuts"])
