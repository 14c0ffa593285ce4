"""Conversion on a real Dask cluster (scheduler + 2 worker processes on 127.0.0.1) and
to/from moto's S3 server, against the local conversion of the same input."""

from __future__ import annotations

import gzip
import json
import time
from pathlib import Path

import numpy as np
import pytest
from adversarial import under_load
from lhotse import CutSet

from wenet_lhotse.convert.raw import import_raw
from wenet_lhotse.convert.shar import shard_is_complete, wenet_to_shar
from wenet_lhotse.corpus import generate_corpus


@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    """24 utterances in 12 WeNet shards of 2, plus the raw list."""
    return generate_corpus(tmp_path_factory.mktemp("cluster"), num_utterances=24,
                           min_duration=0.5, max_duration=1.5, shard_size=2, seed=31)


def shar_contents(out, fs=None):
    """Every file of a Shar directory (local Path or s3:// URL) -> bytes; cuts
    manifests decompressed (gzip headers may differ, the JSON lines may not)."""
    if fs is None:
        files = {p.name: p.read_bytes() for p in Path(out).iterdir()}
    else:
        prefix = out.split("://", 1)[1]
        files = {p.rsplit("/", 1)[1]: fs.cat_file(p) for p in fs.ls(prefix)}
    return {name: gzip.decompress(data) if name.endswith(".gz") else data
            for name, data in files.items()}


def assert_same_shar_cuts(a: CutSet, b: CutSet):
    a, b = list(a), list(b)
    assert [c.id for c in a] == [c.id for c in b] and a
    for x, y in zip(a, b):
        assert x.supervisions[0].text == y.supervisions[0].text
        np.testing.assert_array_equal(x.load_audio(), y.load_audio())


def test_shard_list_to_shar_on_cluster_equals_local(sharded, dask_cluster, tmp_path):
    local = wenet_to_shar(sharded.shards_list, tmp_path / "local", num_jobs=1)
    remote = wenet_to_shar(sharded.shards_list, tmp_path / "dask", cluster=dask_cluster.address)
    assert remote.num_shards == local.num_shards == 12
    assert remote.written_shards == list(range(12)) and remote.num_cuts_written == 24
    assert shar_contents(tmp_path / "dask") == shar_contents(tmp_path / "local")  # byte for byte
    # a rerun on the cluster redoes only what is missing or damaged
    (tmp_path / "dask" / "recording.000003.tar").write_bytes(b"\0" * 100)
    (tmp_path / "dask" / "cuts.000007.jsonl.gz").unlink()
    again = wenet_to_shar(sharded.shards_list, tmp_path / "dask", cluster=dask_cluster.address)
    assert again.written_shards == [3, 7] and len(again.skipped_shards) == 10
    assert shar_contents(tmp_path / "dask") == shar_contents(tmp_path / "local")


def test_raw_import_on_cluster_equals_local(sharded, dask_cluster, tmp_path):
    import_raw(sharded.data_list, tmp_path / "local.jsonl.gz", num_workers=1)
    res = import_raw(sharded.data_list, tmp_path / "dask.jsonl.gz",
                     cluster=dask_cluster.address)
    assert res.num_cuts == 24
    assert (gzip.decompress((tmp_path / "dask.jsonl.gz").read_bytes())
            == gzip.decompress((tmp_path / "local.jsonl.gz").read_bytes()))


@pytest.mark.own_dask_cluster  # kills a worker
def test_worker_killed_mid_run_output_complete(sharded, dask_cluster, tmp_path):
    """One of the two workers is killed (SIGKILL by PID) once shards start to appear:
    Dask reruns its tasks on the other; every shard ends complete and equal."""
    import threading

    out = tmp_path / "dask"
    victim = dask_cluster.workers[0]

    def kill_when_started():
        deadline = time.monotonic() + under_load(60)  # a hang guard: the kill waits
        while time.monotonic() < deadline and not list(out.glob("cuts.*.jsonl.gz")):
            time.sleep(0.01)
        victim.kill()

    killer = threading.Thread(target=kill_when_started)
    killer.start()
    res = wenet_to_shar(sharded.shards_list, out, cluster=dask_cluster.address)
    killer.join()
    assert victim.wait(under_load(10)) is not None  # it really died
    assert res.num_cuts_written == 24 and res.written_shards == list(range(12))
    assert all(shard_is_complete(out, i) for i in range(12))
    local = wenet_to_shar(sharded.shards_list, tmp_path / "local", num_jobs=1)
    assert local.num_cuts_written == 24
    assert shar_contents(out) == shar_contents(tmp_path / "local")


def test_s3_in_and_out_with_a_dropped_connection(sharded, s3_proxy, tmp_path):
    """Shard list and tars on S3, Shar written to S3; the server's connection is cut
    mid-tar once: nothing is lost, the result equals the local conversion."""
    s3, proxy = s3_proxy
    fs = s3.fs()
    names = [Path(p).name for p in sharded.shards_list.read_text().split()]
    for n, p in zip(names, sharded.shards_list.read_text().split()):
        fs.put_file(p, f"{s3.bucket}/shards/{n}")
    fs.pipe_file(f"{s3.bucket}/shards.list",
                 "".join(f"{s3.url('shards/' + n)}\n" for n in names).encode())
    proxy.arm(cut_after=40_000)  # responses carrying a tar are larger than this
    res = wenet_to_shar(s3.url("shards.list"), s3.url("shar"), num_jobs=1)
    assert proxy.faults_done == 1
    assert res.num_cuts_written == 24 and not res.skip_report.items
    wenet_to_shar(sharded.shards_list, tmp_path / "local", num_jobs=1)
    assert shar_contents(s3.url("shar"), fs) == shar_contents(tmp_path / "local")
    # and a rerun finds every shard complete on S3
    again = wenet_to_shar(s3.url("shards.list"), s3.url("shar"), num_jobs=1)
    assert again.written_shards == [] and len(again.skipped_shards) == 12


def test_raw_list_on_s3_to_manifest_on_s3(sharded, s3, tmp_path):
    """A raw list object (audio on a shared filesystem) -> cuts manifest object."""
    s3.fs().put_file(str(sharded.data_list), f"{s3.bucket}/data.list")
    res = import_raw(s3.url("data.list"), s3.url("cuts.jsonl.gz"), num_workers=1)
    assert res.num_cuts == 24
    import_raw(sharded.data_list, tmp_path / "local.jsonl.gz", num_workers=1)
    got = gzip.decompress(s3.fs().cat_file(f"{s3.bucket}/cuts.jsonl.gz"))
    assert got == gzip.decompress((tmp_path / "local.jsonl.gz").read_bytes())
    assert json.loads(got.splitlines()[0])["id"] == sharded.keys[0]


def test_cmvn_on_cluster_equals_local(sharded, dask_cluster):
    from wenet_lhotse.convert.cmvn import compute_cmvn

    local = compute_cmvn(sharded.shards_list, num_jobs=1)
    remote = compute_cmvn(sharded.shards_list, cluster=dask_cluster.address)
    assert remote.frame_num == local.frame_num and remote.num_utts == 24
    # the same sums, merged in another order: equal up to float64 rounding
    np.testing.assert_allclose(remote.mean_stat, local.mean_stat, rtol=1e-12)
    np.testing.assert_allclose(remote.var_stat, local.var_stat, rtol=1e-12)


def tree_bytes(root: Path):
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def test_raw_list_export_on_cluster_equals_local(sharded, dask_cluster, tmp_path):
    """Shar (in-memory audio) -> raw list + audio files: on the cluster, byte for byte
    what the local run writes; a CLI rerun rewrites only the damaged and missing files
    and writes the list again, whole."""
    import os
    import shutil
    import subprocess
    import sys

    from wenet_lhotse.convert.export import export_raw_list

    wenet_to_shar(sharded.shards_list, tmp_path / "shar", num_jobs=1)
    out = tmp_path / "out"
    export_raw_list(tmp_path / "shar", out / "data.list", num_workers=1)
    local = tree_bytes(out)
    assert len(local) == 25 and len(local["data.list"].splitlines()) == 24
    shutil.rmtree(out)
    export_raw_list(tmp_path / "shar", out / "data.list", cluster=dask_cluster.address,
                    chunk_size=5)
    assert tree_bytes(out) == local
    files = sorted((out / "data_audio").iterdir())
    files[3].write_bytes(files[3].read_bytes()[:100])  # damaged
    files[7].unlink()  # missing
    before = {p.name: os.stat(p).st_ino for p in files if p not in (files[3], files[7])}
    (out / "data.list").unlink()
    res = subprocess.run([sys.executable, "-m", "wenet_lhotse", "export", str(tmp_path / "shar"),
                          "-o", str(out / "data.list"), "--cluster", dask_cluster.address],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert "utt" not in res.stderr  # no progress bar: stderr is not a terminal
    assert tree_bytes(out) == local
    assert {p.name: os.stat(p).st_ino for p in files if p.name in before} == before
