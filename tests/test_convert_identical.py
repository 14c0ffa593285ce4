"""Conversion outputs are the same bytes however and whenever they are written: in this
process, with ``-j`` worker processes, on a Dask cluster, and a second later (gzip
headers carry no time stamp and no temporary file name)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Dict

import pytest

from wenet_lhotse.convert.export import export_shards
from wenet_lhotse.convert.raw import import_raw
from wenet_lhotse.convert.shar import wenet_to_shar
from wenet_lhotse.corpus import generate_corpus


@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    """12 utterances as a raw list and 4 WeNet shards of 3."""
    return generate_corpus(tmp_path_factory.mktemp("identical"), num_utterances=12,
                           min_duration=0.5, max_duration=1.2, shard_size=3, seed=41)


def files(out: Path) -> Dict[str, bytes]:
    """Every file of a directory, raw bytes (gzip headers included)."""
    found = {p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.is_file()}
    assert found
    return found


def _tick() -> None:
    """Let the clock move past a whole second (gzip's MTIME has 1 s resolution)."""
    time.sleep(1.05)


def test_raw_import_same_bytes_run_to_run_and_with_workers(sharded, tmp_path):
    import_raw(sharded.data_list, tmp_path / "a" / "cuts.jsonl.gz", num_workers=1)
    _tick()
    import_raw(sharded.data_list, tmp_path / "b" / "cuts.jsonl.gz", num_workers=2)
    a = (tmp_path / "a" / "cuts.jsonl.gz").read_bytes()
    assert a[4:8] == b"\0\0\0\0"  # no time stamp
    assert b"tmp" not in a[:64]   # the header names the output, not a temporary file
    assert a == (tmp_path / "b" / "cuts.jsonl.gz").read_bytes()


@pytest.mark.parametrize("source", ["raw", "shard"])
def test_shar_same_bytes_run_to_run_and_with_jobs(sharded, tmp_path, source):
    src = sharded.data_list if source == "raw" else sharded.shards_list
    size = {"shard_size": 5} if source == "raw" else {}
    wenet_to_shar(src, tmp_path / "one", num_jobs=1, **size)
    _tick()
    wenet_to_shar(src, tmp_path / "two", num_jobs=2, **size)
    one = files(tmp_path / "one")
    assert len([n for n in one if n.startswith("cuts.")]) >= 3
    assert all(data[4:8] == b"\0\0\0\0" for name, data in one.items() if name.endswith(".gz"))
    assert one == files(tmp_path / "two")


def test_export_shards_same_bytes_run_to_run(sharded, tmp_path):
    import_raw(sharded.data_list, tmp_path / "cuts.jsonl.gz", num_workers=1)
    export_shards(tmp_path / "cuts.jsonl.gz", tmp_path / "one", shard_size=5)
    _tick()
    export_shards(tmp_path / "cuts.jsonl.gz", tmp_path / "two", shard_size=5, num_workers=2)
    one = {n: d for n, d in files(tmp_path / "one").items() if n.endswith(".tar")}
    assert len(one) == 3
    assert one == {n: d for n, d in files(tmp_path / "two").items() if n.endswith(".tar")}


@pytest.mark.slow
def test_cluster_outputs_same_bytes_as_local(sharded, dask_cluster, tmp_path):
    wenet_to_shar(sharded.shards_list, tmp_path / "local", num_jobs=1)
    import_raw(sharded.data_list, tmp_path / "local.jsonl.gz", num_workers=1)
    _tick()
    wenet_to_shar(sharded.shards_list, tmp_path / "dask", cluster=dask_cluster.address)
    import_raw(sharded.data_list, tmp_path / "dask.jsonl.gz", cluster=dask_cluster.address)
    assert files(tmp_path / "dask") == files(tmp_path / "local")
    # (different output names: the header's FNAME differs, the rest must not)
    local = (tmp_path / "local.jsonl.gz").read_bytes()
    dask = (tmp_path / "dask.jsonl.gz").read_bytes()
    assert local.replace(b"local.jsonl", b"dask.jsonl") == dask
