"""2 nodes x 2 processes: two torchrun agents on 127.0.0.1 (``--nnodes=2``,
``--node_rank``, c10d rendezvous), gloo on CPU. Tiny data; slow (4 ranks on 2 cores)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from servers import free_port

from wenet_lhotse.corpus import generate_corpus

HERE = Path(__file__).parent
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    """24 utterances in 8 WeNet shards of 3."""
    return generate_corpus(tmp_path_factory.mktemp("multinode"), num_utterances=24,
                           min_duration=0.5, max_duration=1.0, shard_size=3, seed=21)


def _agents(source: str, out: Path, epochs: int, step_sleep: float = 0.0, env=None):
    out.mkdir(parents=True, exist_ok=True)
    port = free_port()
    procs = []
    for node in range(2):
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2",
               "--nproc_per_node=2", f"--node_rank={node}", "--rdzv_backend=c10d",
               f"--rdzv_endpoint=127.0.0.1:{port}", "--rdzv_id=wl-test",
               "--local_addr=127.0.0.1",
               str(HERE / "ddp_multinode.py"), source, str(out), str(epochs), str(step_sleep)]
        log = open(out / f"node{node}.log", "w")
        procs.append(subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}))
    return procs


def kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL a torchrun agent and every process under it (its ranks run in their
    own sessions, so killing the agent's process group would miss them)."""
    import psutil

    try:
        parent = psutil.Process(proc.pid)
        family = parent.children(recursive=True) + [parent]
    except psutil.NoSuchProcess:
        return
    for p in family:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    proc.wait()


def _wait(procs, out: Path, timeout: float = 240):
    deadline = time.monotonic() + timeout
    try:
        for p in procs:
            p.wait(max(1, deadline - time.monotonic()))
    finally:
        for p in procs:
            kill_tree(p)
    logs = "".join((out / f"node{n}.log").read_text()[-3000:] for n in range(2))
    assert all(p.returncode == 0 for p in procs), logs
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(4)]


def check_epochs(ranks, keys_by_shard, epochs: int):
    for e in range(epochs):
        steps = [r["epochs"][e] for r in ranks]
        assert len({len(s) for s in steps}) == 1 and len(steps[0]) > 0  # equal steps
        shards = [{keys_by_shard[k] for b in s for k in b} for s in steps]
        for a in range(4):
            for b in range(a + 1, 4):
                assert not shards[a] & shards[b], f"ranks {a} and {b} read the same shard"
        assert set().union(*shards) == set(keys_by_shard.values())  # every shard read


def test_two_nodes_wenet_shards(sharded, tmp_path):
    out = tmp_path / "run"
    ranks = _wait(_agents(str(sharded.shards_list), out, epochs=2), out)
    lines = sharded.shards_list.read_text().splitlines()
    by_shard = {}
    import tarfile

    for i, tar in enumerate(lines):
        with tarfile.open(tar) as t:
            for m in t.getnames():
                by_shard[m.rsplit(".", 1)[0]] = i
    check_epochs(ranks, by_shard, 2)


def test_two_nodes_shar_on_s3(sharded, s3, tmp_path):
    """The same job reading a Shar prefix on the S3 server (8 shards of 3)."""
    import gzip
    import json as js

    from wenet_lhotse.convert.shar import wenet_to_shar

    wenet_to_shar(sharded.shards_list, tmp_path / "shar", num_jobs=1)
    url = s3.put_dir(tmp_path / "shar", "train/shar")
    by_shard = {}
    for i in range(8):
        with gzip.open(tmp_path / "shar" / f"cuts.{i:06d}.jsonl.gz", "rt") as f:
            for line in f:
                by_shard[js.loads(line)["id"]] = i
    out = tmp_path / "run"
    ranks = _wait(_agents(url, out, epochs=2, env=s3.env), out)
    check_epochs(ranks, by_shard, 2)


def test_killed_node_surfaces_as_error(sharded, tmp_path):
    out = tmp_path / "kill"
    procs = _agents(str(sharded.shards_list), out, epochs=1000, step_sleep=0.5)
    deadline = time.monotonic() + 180
    while not all((out / f"started.{r}").exists() for r in range(4)):
        assert time.monotonic() < deadline, "the job did not start"
        assert all(p.poll() is None for p in procs), (out / "node0.log").read_text()[-3000:]
        time.sleep(0.5)
    kill_tree(procs[1])  # node 1: its agent and both its ranks
    t0 = time.monotonic()
    try:
        code = procs[0].wait(120)
    finally:
        for p in procs:
            kill_tree(p)
    took = time.monotonic() - t0
    log = (out / "node0.log").read_text()
    assert code != 0, log[-3000:]  # an error, not a silent success or a hang
    errors = {p.name: p.read_text() for p in out.glob("error.*")}
    print(f"node 0 failed {took:.1f} s after node 1 was killed; ranks saw {errors}")
