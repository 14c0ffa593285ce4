"""formats.index_writer: the shard index written one tar at a time (bounded memory),
header last, atomically; a list of thousands of tars gives one index file and leaves
no per-tar file handle or map open."""

from __future__ import annotations

import io
import os
import struct
import tarfile

import pytest

from wenet_lhotse.convert.index import index_shards
from wenet_lhotse.formats.index_writer import IndexWriter
from wenet_lhotse.formats.shard_index import ShardIndex
from wenet_lhotse.formats.tar_index import TarRows


def _wav(n: int) -> bytes:
    data = bytes(2 * n)
    return (b"RIFF" + struct.pack("<I", 36 + len(data)) + b"WAVEfmt "
            + struct.pack("<IHHIIHH", 16, 1, 1, 16000, 32000, 2, 16)
            + b"data" + struct.pack("<I", len(data)) + data)


def tiny_tars(root, num_tars: int, per_tar: int = 1) -> str:
    """``num_tars`` tars of ``per_tar`` utterances of 10 ms, and their list."""
    root.mkdir(parents=True, exist_ok=True)
    lines = []
    for t in range(num_tars):
        path = root / f"{t:06d}.tar"
        with tarfile.open(path, "w") as tf:
            for u in range(per_tar):
                for suffix, data in (("txt", f"t{t} u{u}".encode()), ("wav", _wav(160))):
                    info = tarfile.TarInfo(f"k{t:06d}_{u:04d}.{suffix}")
                    info.size = len(data)
                    tf.addfile(info, io.BytesIO(data))
        lines.append(f"{path}\n")
    lst = root / "shards.list"
    lst.write_text("".join(lines))
    return str(lst)


def _open_fds() -> set:
    return {os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")
            if os.path.exists(f"/proc/self/fd/{fd}")}


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="needs /proc")
def test_thousands_of_tars_one_index_no_per_tar_handles(tmp_path):
    from wenet_lhotse.sources.indexed_shards import IndexReader, open_shard_index

    lst = tiny_tars(tmp_path / "many", 3000)
    before = _open_fds()
    summary = index_shards(lst)
    assert (summary.tars, summary.utterances, summary.bad) == (3000, 3000, 0)
    assert {p for p in _open_fds() - before if ".tar" in p or ".tmp" in p} == set()
    leftovers = [p for p in os.listdir(tmp_path / "many") if not p.endswith(".tar")]
    assert sorted(leftovers) == ["shards.list", "shards.list.index"]  # no temporary files
    reader = IndexReader(open_shard_index([lst], "auto"), shuffle=True, seed=3)
    ids = [c.id for _, c in reader.iter_from(0)]
    assert sorted(ids) == [f"k{t:06d}_0000" for t in range(3000)]
    with open("/proc/self/maps") as f:
        maps = [line for line in f if str(tmp_path) in line]
    assert {line.split()[-1] for line in maps} == {lst + ".index"}  # one map, no tar's


def test_writer_streams_rows_and_matches_a_reread(tmp_path):
    path = str(tmp_path / "x.index")
    tars = [TarRows(url=f"/d/{t}.tar", size=10 + t, digest="d", keys=[f"k{t}a", f"k{t}b"],
                    fmts=["wav", "flac" if t else "wav"], offsets=[512, 2048],
                    sizes=[100, 200 + t], num_samples=[1600, 3200], rates=[16000, 8000],
                    channels=[1, 2], crcs=[7 + t, 2**32 - 1 - t], texts=["你好", f"t{t}"],
                    extras=["", '{"lang": "zh"}'],
                    bad=[("cut short", "truncated", None)] if t == 2 else [])
            for t in range(4)]
    tars.insert(1, TarRows(url="/d/empty.tar", bad=[("gone", "missing_file", None)]))
    with IndexWriter(path, ["l.list"]) as w:
        for t in tars:
            w.add(t)
        size = w.close()
    assert size == os.path.getsize(path)
    ix = ShardIndex(path)
    assert (ix.n, ix.lists, len(ix.tars)) == (8, ["l.list"], 5)
    for t, rows in enumerate(tars):
        got = ix.tar_rows(t)
        assert got == rows
    assert os.listdir(tmp_path) == ["x.index"]


def test_writer_error_leaves_the_old_index_and_no_temporary_files(tmp_path):
    path = tmp_path / "x.index"
    path.write_bytes(b"old")
    with pytest.raises(RuntimeError):
        with IndexWriter(str(path)) as w:
            w.add(TarRows(url="/a.tar", keys=["k"], fmts=["wav"], offsets=[512], sizes=[4],
                          num_samples=[2], rates=[16000], channels=[1], crcs=[0],
                          texts=["t"], extras=[""]))
            raise RuntimeError("interrupted")
    assert os.listdir(tmp_path) == ["x.index"] and path.read_bytes() == b"old"


def test_repeated_keys_are_dropped_on_disk_first_kept(tmp_path, monkeypatch):
    import wenet_lhotse.formats.index_dedup as dedup

    monkeypatch.setattr(dedup, "PIECE_ROWS", 2)  # copies in several pieces

    def rows(url, keys):
        n = len(keys)
        return TarRows(url=url, size=1, keys=keys, fmts=["wav"] * n,
                       offsets=[512 * (i + 1) for i in range(n)], sizes=[10 + i for i in range(n)],
                       num_samples=[5] * n, rates=[16000] * n, channels=[1] * n,
                       crcs=[i for i in range(n)], texts=[f"文{k}" for k in keys], extras=[""] * n)

    tars = [rows("/a.tar", ["k1", "k2", "k3"]), rows("/b.tar", ["k4", "k2", "k5", "k1"]),
            rows("/c.tar", ["k6"]), rows("/d.tar", ["k5"])]
    path = str(tmp_path / "x.index")
    with IndexWriter(path) as w:
        for t in tars:
            w.add(t)
        w.close()
    assert (w.rows, w.bad) == (6, 3)
    ix = ShardIndex(path)
    assert [ix.key(r) for r in range(ix.n)] == ["k1", "k2", "k3", "k4", "k5", "k6"]
    assert [ix.text(r) for r in range(ix.n)] == [f"文k{i}" for i in range(1, 7)]
    assert [int(v) for v in ix.cols["size"]] == [10, 11, 12, 10, 12, 10]
    assert [(t["first"], t["count"]) for t in ix.tars] == [(0, 3), (3, 2), (5, 1), (6, 0)]
    assert [int(v) for v in ix.cols["tar"]] == [0, 0, 0, 1, 1, 2]
    assert [b[2] for b in ix.tars[1]["bad"]] == ["k2.wav", "k1.wav"]
    assert ix.tars[3]["bad"] == [["duplicate key 'k5' (seen earlier in this list)",
                                  "duplicate", "k5.wav"]]
    assert ix.tar_rows(1).keys == ["k4", "k5"]
