"""formats.shard_index / formats.tar_index / convert.index: the shard index of a WeNet
shard list, its staleness checks, reruns, and indexing over S3 (moto) and HTTP."""

from __future__ import annotations

import os
import shutil
import tarfile

import pytest
from lhotse import CutSet
from lhotse.utils import fastcopy

from wenet_lhotse.convert.index import index_shards
from wenet_lhotse.errors import SkipReport, WenetDataError
from wenet_lhotse.formats import read_raw_list, read_shard_list, write_wenet_shards
from wenet_lhotse.formats.member_reads import BLOCK_BYTES, read_members
from wenet_lhotse.formats.shard_index import ShardIndex
from wenet_lhotse.io.policy import ReadPolicy
from wenet_lhotse.sources.indexed_shards import IndexReader, open_shard_index


@pytest.fixture
def shards(corpus, tmp_path):
    """The 20-utterance corpus as 5 tars of 4 (speaker fields included)."""
    cuts = CutSet.from_cuts(list(read_raw_list(corpus.data_list)))
    lst = write_wenet_shards(cuts, tmp_path / "shards", shard_size=4,
                             list_path=tmp_path / "shards.list")
    return {"cuts": cuts, "list": str(lst), "dir": tmp_path / "shards",
            "tars": sorted(str(p) for p in (tmp_path / "shards").glob("*.tar"))}


def _rows(ix: ShardIndex):
    c = ix.cols
    return [(ix.key(r), ix.member(r), int(c["offset"][r]), int(c["size"][r]),
             int(c["num_samples"][r]), int(c["rate"][r]), ix.text(r), ix.extra(r))
            for r in range(ix.n)]


def test_index_equals_the_tars_contents(shards):
    summary = index_shards(shards["list"], num_jobs=2)
    assert (summary.tars, summary.read, summary.utterances, summary.bad) == (5, 5, 20, 0)
    ix = ShardIndex(summary.path)
    assert summary.path == shards["list"] + ".index"
    streamed = {c.id: c for c in read_shard_list(shards["list"])}
    assert [ix.key(r) for r in range(ix.n)] == list(streamed)  # list order, tar order
    for r in range(ix.n):
        cut = streamed[ix.key(r)]
        assert int(ix.cols["num_samples"][r]) == cut.recording.num_samples
        assert int(ix.cols["rate"][r]) == cut.sampling_rate
        assert ix.text(r) == cut.supervisions[0].text
        assert cut.supervisions[0].speaker in ix.extra(r)
    # offsets and sizes are those of the members in the tar, byte for byte
    for rec in ix.tars:
        with tarfile.open(rec["url"]) as tf:
            members = {m.name: tf.extractfile(m).read() for m in tf if m.name.endswith(".wav")}
        rows = range(rec["first"], rec["first"] + rec["count"])
        got = read_members(rec["url"], [(ix.member(r), int(ix.cols["offset"][r]),
                                         int(ix.cols["size"][r])) for r in rows])
        assert got == {ix.member(r): members[ix.member(r)] for r in rows}
        assert rec["size"] == os.path.getsize(rec["url"]) and rec["digest"]


def test_rerun_reads_only_new_or_changed_tars(shards, tmp_path):
    first = index_shards(shards["list"])
    before = _rows(ShardIndex(first.path))
    again = index_shards(shards["list"])
    assert (again.read, again.kept) == (0, 5)
    assert _rows(ShardIndex(again.path)) == before
    # tar 2 rewritten with other content; a sixth tar appended to the list
    changed = shards["tars"][2]
    renamed = [fastcopy(c, id=f"x-{c.id}") for c in list(shards["cuts"])[:7]]
    other = write_wenet_shards(renamed[:4], tmp_path / "other", shard_size=4,
                               list_path=tmp_path / "other.list")
    extra = write_wenet_shards(renamed[4:], tmp_path / "more", shard_size=3,
                               list_path=tmp_path / "more.list")
    shutil.copy(open(other).read().strip(), changed)
    with open(shards["list"], "a") as f:
        f.write(open(extra).read())
    third = index_shards(shards["list"])
    assert (third.read, third.kept, third.tars) == (2, 4, 6)
    ix = ShardIndex(third.path)
    assert [ix.key(r) for r in range(4)] == [row[0] for row in before[:4]]
    # the replaced tar now indexes its new utterances -- as a streamed read sees them
    rec = ix.tars[2]
    assert [ix.key(r) for r in range(rec["first"], rec["first"] + rec["count"])] == [
        c.id for c in renamed[:4]] and rec["bad"] == []
    assert ix.tars[5]["count"] == 3


def _damage(how: str, tar: str, other: str) -> None:
    if how == "missing":
        os.remove(tar)
    elif how == "truncated":
        with open(tar, "r+b") as f:
            f.truncate(os.path.getsize(tar) // 2)
    elif how == "replaced":
        shutil.copy(other, tar)
        with open(tar, "ab") as f:
            f.write(bytes(10240))  # another size too
    elif how == "changed":  # same size, other bytes at the start
        data = bytearray(open(tar, "rb").read())
        data[600:700] = bytes(b ^ 0xFF for b in data[600:700])
        open(tar, "wb").write(bytes(data))
        os.utime(tar, ns=(1, 1))


@pytest.mark.parametrize("how", ["missing", "truncated", "replaced", "changed"])
def test_a_stale_tar_is_one_error_or_one_counted_skip(shards, how):
    index_shards(shards["list"])
    tar = shards["tars"][1]
    _damage(how, tar, shards["tars"][3])
    with pytest.raises(WenetDataError) as err:
        open_shard_index([shards["list"]], "auto",
                         policy=ReadPolicy(strict=True, skip_report=SkipReport()))
    msg = str(err.value)
    assert msg.startswith(tar) and "\n" not in msg and "wenet-lhotse index" in msg
    report = SkipReport()
    policy = ReadPolicy(strict=False, skip_report=report)
    parts = open_shard_index([shards["list"]], "auto", policy=policy)
    assert [(i.source, i.kind) for i in report] == [(tar, "stale_index")]
    assert "4 utterances left out" in report.items[0].message
    reader = IndexReader(parts)
    keys = [c.id for _, c in reader.iter_from(0)]
    assert len(keys) == 16 and len(set(keys)) == 16


def test_no_index_and_a_listed_tar_missing_from_the_index(shards, tmp_path):
    assert open_shard_index([shards["list"]], "auto",
                            policy=ReadPolicy(strict=True, skip_report=SkipReport())) is None
    with pytest.raises(ValueError, match="wenet-lhotse index"):
        open_shard_index([shards["list"]], True,
                         policy=ReadPolicy(strict=True, skip_report=SkipReport()))
    index_shards(shards["list"])
    extra = write_wenet_shards(list(shards["cuts"])[:2], tmp_path / "more", shard_size=2,
                               list_path=tmp_path / "more.list")
    with open(shards["list"], "a") as f:
        f.write(open(extra).read())
    with pytest.raises(WenetDataError, match="listed but not in the index"):
        open_shard_index([shards["list"]], "auto",
                         policy=ReadPolicy(strict=True, skip_report=SkipReport()))


def test_bad_items_are_recorded_and_reported(shards):
    # a member that is not audio: the indexer records it as the streamed reader skips it
    tar = shards["tars"][0]
    with tarfile.open(tar) as tf:
        items = [(m, tf.extractfile(m).read()) for m in tf]
    import io

    with tarfile.open(tar, "w") as tf:
        first_wav = next(m.name for m, _ in items if m.name.endswith(".wav"))
        for m, data in items:
            data = b"not audio at all" if m.name == first_wav else data
            m.size = len(data)
            tf.addfile(m, io.BytesIO(data))
    summary = index_shards(shards["list"])
    assert summary.bad == 1 and summary.utterances == 19
    with pytest.raises(WenetDataError, match="cannot read audio"):
        open_shard_index([shards["list"]], "auto",
                         policy=ReadPolicy(strict=True, skip_report=SkipReport()))
    report = SkipReport()
    reader = IndexReader(open_shard_index([shards["list"]], "auto",
                                          policy=ReadPolicy(strict=False, skip_report=report)),
                         policy=ReadPolicy(strict=False, skip_report=report))
    for epoch in range(2):
        reader.set_epoch(epoch)
        assert len(list(reader.iter_from(0))) == 19
    assert [i.kind for i in report] == ["bad_audio", "bad_audio"]  # once per epoch


def test_a_key_repeated_in_a_later_tar_is_recorded_once_as_bad(shards, tmp_path):
    with open(shards["list"], "a") as f:
        f.write(shards["tars"][0] + "\n")  # tar 0 listed twice
    summary = index_shards(shards["list"])
    assert summary.utterances == 20 and summary.bad == 4
    ix = ShardIndex(summary.path)
    assert ix.tars[5]["count"] == 0 and {b[1] for b in ix.tars[5]["bad"]} == {"duplicate"}
    report = SkipReport()
    reader = IndexReader(open_shard_index([shards["list"]], "auto",
                                          policy=ReadPolicy(strict=False, skip_report=report)),
                         policy=ReadPolicy(strict=False, skip_report=report))
    keys = [c.id for _, c in reader.iter_from(0)]
    assert sorted(keys) == sorted(c.id for c in shards["cuts"])  # each once
    assert [i.kind for i in report] == ["duplicate"] * 4


def test_cli_index_is_one_line(shards, tmp_path):
    from click.testing import CliRunner

    from wenet_lhotse.cli import main

    res = CliRunner().invoke(main, ["index", shards["list"], "-j", "1"])
    assert res.exit_code == 0 and "20 utterances in 5 tars" in res.output
    res = CliRunner().invoke(main, ["index", "s3://bucket/shards.list"])
    assert res.exit_code == 1
    assert res.output.count("\n") == 1 and "--cache-dir" in res.output


def test_cache_dir_for_read_only_data(shards, tmp_path):
    os.chmod(shards["dir"], 0o555)
    cache = tmp_path / "cache"
    summary = index_shards(shards["list"], cache_dir=str(cache))
    assert summary.path.startswith(str(cache))
    parts = open_shard_index([shards["list"]], str(cache),
                             policy=ReadPolicy(strict=True, skip_report=SkipReport()))
    assert parts[0][0] == summary.path and len(IndexReader(parts)) == 20


@pytest.mark.slow
def test_index_over_s3_and_http_equals_the_local_one(shards, s3, http_serve, tmp_path):
    local = _rows(ShardIndex(index_shards(shards["list"]).path))
    names = [os.path.basename(t) for t in shards["tars"]]
    http = http_serve(shards["dir"], mode="ranges")
    remote = {"s3": s3.put_dir(shards["dir"], "shards"), "http": http}
    for scheme, base in remote.items():
        lst = tmp_path / f"{scheme}.list"
        lst.write_text("".join(f"{base}/{n}\n" for n in names))
        summary = index_shards(str(lst), cache_dir=str(tmp_path / "cache"), num_jobs=2)
        ix = ShardIndex(summary.path)
        assert _rows(ix) == local, scheme
        assert [t["size"] for t in ix.tars] == [os.path.getsize(t) for t in shards["tars"]]
        # the members read back by offset over the network (ranged reads)
        rec = ix.tars[1]
        rows = range(rec["first"], rec["first"] + rec["count"])
        seen = len(http.server.ranges)
        got = read_members(rec["url"], [(ix.member(r), int(ix.cols["offset"][r]),
                                         int(ix.cols["size"][r])) for r in rows])
        if scheme == "http":  # the tar's members in one block-aligned range request ...
            assert http.server.ranges[seen:] == [f"bytes=0-{BLOCK_BYTES - 1}"]
            again = read_members(rec["url"], [(ix.member(r), int(ix.cols["offset"][r]),
                                               int(ix.cols["size"][r])) for r in rows])
            assert again == got and len(http.server.ranges) == seen + 1  # ... then cached
        with tarfile.open(shards["tars"][1]) as tf:
            assert got == {m.name: tf.extractfile(m).read() for m in tf
                           if m.name.endswith(".wav")}
    # object storage: a rerun checks ETags and reads nothing
    again = index_shards(str(tmp_path / "s3.list"), cache_dir=str(tmp_path / "cache"))
    assert (again.read, again.kept) == (0, 5)


@pytest.mark.slow
def test_index_on_a_dask_cluster_equals_the_local_one(shards, dask_cluster, tmp_path):
    local = _rows(ShardIndex(index_shards(shards["list"]).path))
    summary = index_shards(shards["list"], out=str(tmp_path / "cluster.index"),
                           cluster=dask_cluster.address)
    assert summary.read == 5 and _rows(ShardIndex(summary.path)) == local
