"""Bounded by construction (issue 30): every reader of lines has a length limit (the
read policy's ``max_line_bytes``), named in a one-line error; fault-tolerant readers skip
and count such a line. The memory cases run in a subprocess that reports its peak RSS
(``ru_maxrss``) above its own baseline after the imports, under an address-space cap
(RLIMIT_AS) so that a regression fails instead of swapping."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from adversarial import REPO, cli

from wenet_lhotse import ReadPolicy, SkipReport, WenetDataError, read_raw_list
from wenet_lhotse.formats.shard_list import read_shard_entries
from wenet_lhotse.io.lines import DEFAULT_MAX_LINE_BYTES, bounded_lines
from wenet_lhotse.sources.manifest import LazyCheckedManifest

#: The address-space cap of the memory subprocesses (torch and Lhotse imported take
#: ~1.5 GB of address space here) and the growth of peak RSS allowed (bytes).
AS_LIMIT = 3 << 30
RSS_GROWTH = 300 << 20


def peak_growth(code: str, timeout: int = 300):
    """Run ``code`` (after the package's imports) in a fresh interpreter under
    :data:`AS_LIMIT`; returns ``(result, stdout)`` where the last stdout line is the
    growth of peak RSS (bytes) the code caused."""
    prelude = textwrap.dedent(f"""\
        import resource
        resource.setrlimit(resource.RLIMIT_AS, ({AS_LIMIT}, {AS_LIMIT}))
        import wenet_lhotse, lhotse, torch  # noqa
        from wenet_lhotse import ReadPolicy, WenetDataError, read_raw_list  # noqa
        from wenet_lhotse.sources.manifest import LazyCheckedManifest  # noqa
        from wenet_lhotse.sources.text import read_text_source  # noqa
        from wenet_lhotse.text.tokenizer import CharTokenizer  # noqa
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        """)
    tail = "\nprint(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base)\n"
    res = subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code) + tail],
                         capture_output=True, text=True, timeout=timeout,
                         env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert res.returncode == 0, res.stdout + res.stderr
    *out, growth = res.stdout.strip().splitlines()
    return int(growth) * 1024, out


def sparse_list(path, size: int, after: str = ""):
    """A file of ``size`` zero bytes (sparse: a few KB on disk), then ``after``."""
    with open(path, "wb") as f:
        f.truncate(size)
        f.seek(size)
        f.write(after.encode())
    return path


def gz_one_line(path, gigabytes: float = 6.0):
    """A ``.gz`` of ~6 MB holding one line of ``gigabytes`` GB: gzip members of 64 MiB
    of ``a`` each (~64 KB), written again and again (a gzip file may hold many)."""
    member = gzip.compress(b"a" * (64 << 20), compresslevel=9)
    with open(path, "wb") as f:
        for _ in range(int(gigabytes * 1e9) // (64 << 20)):
            f.write(member)
    return path


def test_bounded_lines_limits_holds_and_skips():
    import io

    data = b"ok\n" + b"x" * 100 + b"\n" + b"y" * 10 + b"\nlast"
    with pytest.raises(WenetDataError) as e:
        list(bounded_lines(io.BytesIO(data), "d.list", limit=50))
    assert e.value.line == 2 and e.value.kind == "too_long"
    assert "50 bytes" in str(e.value) and "max_line_bytes" in str(e.value)
    skipped = []
    got = list(bounded_lines(io.BytesIO(data), "d.list", limit=50, on_too_long=skipped.append))
    assert got == [(1, b"ok\n"), (3, b"y" * 10 + b"\n"), (4, b"last")]
    assert [s.line for s in skipped] == [2]
    # a line of exactly the limit (its ending not counted) is read
    assert list(bounded_lines(io.BytesIO(b"z" * 50 + b"\n"), "d", limit=50)) == \
        [(1, b"z" * 50 + b"\n")]
    assert DEFAULT_MAX_LINE_BYTES == 16 << 20


def test_a_10gb_sparse_list_and_6mb_one_line_gz_are_one_line_errors_in_bounded_memory(
        tmp_path):
    """One subprocess (the imports paid once) reads a 10 GB sparse raw list, a 6 MB
    one-line ``.gz`` text source and the same bytes as a cuts manifest."""
    path = sparse_list(tmp_path / "data.list", 10 << 30)
    assert os.stat(path).st_blocks * 512 < 1 << 20  # sparse: nothing much on disk
    gz = gz_one_line(tmp_path / "text.txt.gz")
    assert os.path.getsize(gz) < 8 << 20
    man = tmp_path / "cuts.jsonl.gz"
    os.link(gz, man)
    growth, out = peak_growth(f"""
        for what in ("raw", "text", "cuts"):
            try:
                if what == "raw":
                    list(read_raw_list({str(path)!r}))
                elif what == "text":
                    read_text_source([{str(gz)!r}], CharTokenizer({{"a": 1}}))
                else:
                    for _ in LazyCheckedManifest([{str(man)!r}]):  # (list() would len())
                        pass
            except WenetDataError as err:
                print(err)
        """)
    assert growth < RSS_GROWTH, growth
    limit = f"line longer than the limit of {16 << 20} bytes"
    assert out[0].startswith(f"{path}:1: {limit}") and "lhotse_conf.max_line_bytes" in out[0]
    assert out[1].startswith(f"{gz}:1: {limit}")
    assert out[2].startswith(f"{man}:1: {limit}")
    for args, where in ((["import", path, "-o", tmp_path / "cuts2.jsonl.gz"], "data.list:1"),
                        (["stats", man], "cuts.jsonl.gz:1")):
        res = cli(*args, check=1)  # the CLI: one line, no traceback
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and where in lines[0] and "max_line_bytes" in lines[0], \
            res.stderr


def test_fault_tolerant_raw_list_skips_and_counts_a_long_line(tmp_path, corpus, monkeypatch):
    good = corpus.data_list.read_text(encoding="utf-8").splitlines()[0]
    path = tmp_path / "data.list"
    with open(path, "wb") as f:  # a long line of zeros (sparse), then a good line
        f.write(b"\n")
        f.truncate(1 + (8 << 20))
        f.seek(1 + (8 << 20))
        f.write(("\n" + good + "\n").encode())
    monkeypatch.setenv("WENET_LHOTSE_MAX_LINE_BYTES", str(1 << 20))
    report = SkipReport()
    cuts = list(read_raw_list(path, policy=ReadPolicy(strict=False, skip_report=report)))
    assert [c.id for c in cuts] == [json.loads(good)["key"]]
    assert [(s.line, s.kind) for s in report.items] == [(2, "too_long")]
    # the policy's own limit wins over the environment's
    cuts = list(read_raw_list(path, policy=ReadPolicy(strict=False,
                                                      max_line_bytes=16 << 20)))
    assert len(cuts) == 1  # the zeros line was read (and is bad JSON, skipped)


def test_shard_list_lines_are_bounded_and_read_lazily(tmp_path, monkeypatch):
    path = tmp_path / "shards.list"
    path.write_bytes(b"/a.tar\n" + b"/b" * 600 + b".tar\n/c.tar\n")
    monkeypatch.setenv("WENET_LHOTSE_MAX_LINE_BYTES", "1000")
    with pytest.raises(WenetDataError, match=r"shards\.list:2: line longer than the limit "
                                             r"of 1000 bytes"):
        read_shard_entries(path)
    report = SkipReport()
    got = read_shard_entries(path, policy=ReadPolicy(strict=False, skip_report=report))
    assert [(e.url, e.line) for e in got] == [("/a.tar", 1), ("/c.tar", 3)]
    assert [s.kind for s in report.items] == ["too_long"]
    src = (REPO / "wenet_lhotse" / "formats" / "shard_list.py").read_text()
    assert "f.read()" not in src  # read line by line, never whole


def test_manifest_positions_hold_past_a_long_line(tmp_path, corpus, monkeypatch):
    """A skipped long line keeps its place: the lines after it keep their positions."""
    from lhotse import CutSet

    cuts = list(CutSet.from_cuts(list(read_raw_list(corpus.data_list))))[:3]
    lines = [json.dumps(c.to_dict()) for c in cuts]
    path = tmp_path / "cuts.jsonl"
    path.write_text("\n".join([lines[0], '{"x": "' + "y" * 5000 + '"}', lines[1], lines[2]])
                    + "\n", encoding="utf-8")
    monkeypatch.setenv("WENET_LHOTSE_MAX_LINE_BYTES", "4096")
    report = SkipReport()
    got = list(LazyCheckedManifest([path], policy=ReadPolicy(strict=False, skip_report=report)))
    assert [c.id for c in got] == [c.id for c in cuts]
    assert [(s.line, s.kind) for s in report.items] == [(2, "too_long")]
    from wenet_lhotse.sources.positioned import JsonlReader

    reader = JsonlReader([str(path)], policy=ReadPolicy(strict=False))
    assert [(pos, c.id) for pos, c in reader.iter_from(0)] == \
        [(0, cuts[0].id), (2, cuts[1].id), (3, cuts[2].id)]


def test_max_line_bytes_is_a_lhotse_conf_key():
    from wenet_lhotse.loader.config import LhotseConf

    assert LhotseConf.from_dict({"max_line_bytes": 123}).read_policy().line_limit() == 123
    with pytest.raises(WenetDataError, match="lhotse_conf.max_line_bytes"):
        LhotseConf.from_dict({"max_line_bytes": 0})



# ------------------------------------------------------- outputs never clobber inputs


@pytest.fixture(scope="module")
def small(corpus, tmp_path_factory):
    """3 utterances as a raw list (own wav copies), a one-tar shard list and a Shar dir."""
    import shutil

    from lhotse import CutSet

    from wenet_lhotse.formats import write_wenet_shards

    root = tmp_path_factory.mktemp("clobber")
    lines = []
    for line in corpus.data_list.read_text(encoding="utf-8").splitlines()[:3]:
        obj = json.loads(line)
        wav = root / os.path.basename(obj["wav"])
        shutil.copy(obj["wav"], wav)
        lines.append(json.dumps({**obj, "wav": str(wav)}))
    raw = root / "data.list"
    raw.write_text("\n".join(lines) + "\n", encoding="utf-8")
    cuts = CutSet.from_cuts(list(read_raw_list(raw)))
    shards = write_wenet_shards(cuts, root / "shards", shard_size=5,
                                list_path=root / "shards.list")
    shar = root / "shar"
    shar.mkdir()
    cuts.to_shar(shar, fields={"recording": "wav"}, shard_size=5)
    tar = shards.read_text(encoding="utf-8").split()[0]
    return {"raw": raw, "wav": json.loads(lines[0])["wav"], "shards": shards, "tar": tar,
            "shar": shar}


def _digest(path) -> str:
    import hashlib

    if os.path.isdir(path):
        return ",".join(sorted(f"{n}:{_digest(os.path.join(path, n))}"
                               for n in os.listdir(path)))
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


@pytest.mark.parametrize("case", ["index_list", "index_tar", "pq_tar", "pq_self",
                                  "import_wav", "export_into_shar"])
def test_an_output_that_is_or_lies_in_an_input_is_refused(small, case):
    args, victim = {
        "index_list": (["index", small["shards"], "-o", small["shards"]], small["shards"]),
        "index_tar": (["index", small["shards"], "-o", small["tar"]], small["tar"]),
        "pq_tar": (["parquet-export", small["shards"], small["tar"]], small["tar"]),
        "pq_self": (["parquet-export", small["raw"], small["raw"]], small["raw"]),
        "import_wav": (["import", small["raw"], "-o", small["wav"]], small["wav"]),
        "export_into_shar": (["export", small["shar"], "-o", small["shar"] / "data.list"],
                             small["shar"]),
    }[case]
    if case.startswith("pq"):
        pytest.importorskip("pyarrow")
    before = _digest(victim)
    res = cli(*args)
    assert res.returncode != 0, res.stdout + res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert "input" in lines[0] and "overwrite" in lines[0], lines[0]
    assert _digest(victim) == before  # untouched
    if case == "export_into_shar":
        assert "inside the input directory" in lines[0]
        from lhotse import CutSet

        assert len(list(CutSet.from_shar(in_dir=small["shar"]))) == 3  # still Lhotse's


def test_an_output_path_with_a_control_character_is_refused(small, tmp_path):
    for args in (["import", small["raw"], "-o", tmp_path / "a\nb" / "cuts.jsonl.gz"],
                 ["export", small["shar"], "-o", tmp_path / "d\r" / "data.list"],
                 ["import", small["raw"], "--shar", tmp_path / "s\nx"]):
        res = cli(*args)
        assert res.returncode != 0
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and "control character" in lines[0], res.stderr
    assert sorted(os.listdir(tmp_path)) == []  # nothing made


def test_the_guard_checks_audio_met_while_reading(small, tmp_path):
    from wenet_lhotse.convert.raw import import_raw
    from wenet_lhotse.io.outputs import OutputClobbersInput, OutputGuard, refuse_clobber

    before = _digest(small["wav"])
    with pytest.raises(OutputClobbersInput, match="the audio"):
        import_raw(small["raw"], small["wav"])
    assert _digest(small["wav"]) == before
    assert not OutputGuard(tmp_path / "new.list").active  # nothing to check, no cost
    refuse_clobber(tmp_path / "out.list", [small["raw"], small["shar"]])  # fine
    os.link(small["raw"], tmp_path / "hard.list")  # a hard link is the same file
    with pytest.raises(OutputClobbersInput):
        refuse_clobber(tmp_path / "hard.list", [small["raw"]])


# ------------------------------------------------- a tar edited in place, a damaged index


@pytest.fixture
def indexed(corpus, tmp_path):
    """The corpus as 2 tars of 4 utterances, indexed."""
    from lhotse import CutSet

    from wenet_lhotse.convert.index import index_shards
    from wenet_lhotse.formats import write_wenet_shards

    cuts = CutSet.from_cuts(list(read_raw_list(corpus.data_list))[:8])
    lst = write_wenet_shards(cuts, tmp_path / "shards", shard_size=4,
                             list_path=tmp_path / "shards.list")
    summary = index_shards(str(lst))
    return {"list": str(lst), "index": summary.path,
            "tars": sorted(str(p) for p in (tmp_path / "shards").glob("*.tar"))}


def _edit_member_in_place(ix, row: int, tar: str, keep_mtime: bool) -> None:
    """Flip 64 bytes in the middle of row ``row``'s audio (same size)."""
    st = os.stat(tar)
    mid = int(ix.cols["offset"][row]) + int(ix.cols["size"][row]) // 2
    with open(tar, "r+b") as f:
        f.seek(mid)
        data = f.read(64)
        f.seek(mid)
        f.write(bytes(b ^ 0xFF for b in data))
    if keep_mtime:
        os.utime(tar, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.path.getsize(tar) == st.st_size


@pytest.mark.parametrize("keep_mtime", [False, True])
def test_a_tar_edited_in_place_is_never_read_as_other_bytes(indexed, keep_mtime):
    from wenet_lhotse.convert.index import index_shards
    from wenet_lhotse.formats.member_reads import read_members
    from wenet_lhotse.formats.shard_index import ShardIndex
    from wenet_lhotse.sources.indexed_shards import IndexReader, open_shard_index

    ix = ShardIndex(indexed["index"])
    row = 5  # the second tar's second utterance
    tar = ix.tars[int(ix.cols["tar"][row])]["url"]
    _edit_member_in_place(ix, row, tar, keep_mtime)
    # training: the start-up check sees the same size and ends...
    parts = open_shard_index([indexed["list"]], "auto", policy=ReadPolicy(strict=True))
    cut = IndexReader(parts, light=False).build_cut(0, row)
    c = cut.custom
    got = read_members(c["shard_tar"], [(c["shard_member"], c["shard_offset"],
                                         c["shard_size"], c["shard_crc"])])
    err = got[c["shard_member"]]  # ...but the read by offset checks the member's CRC
    assert isinstance(err, WenetDataError) and err.kind == "stale_index", err
    assert str(err).startswith(f"{tar}[{c['shard_member']}]: changed since it was indexed")
    assert "wenet-lhotse index" in str(err)
    other = IndexReader(parts, light=False).build_cut(0, row - 1).custom  # untouched
    ok = read_members(other["shard_tar"], [(other["shard_member"], other["shard_offset"],
                                            other["shard_size"], other["shard_crc"])])
    assert isinstance(ok[other["shard_member"]], bytes)
    # rerunning index notices the change (even with the mtime put back) and reads it again
    again = index_shards(indexed["list"])
    assert (again.read, again.kept) == (1, 1)
    assert index_shards(indexed["list"]).read == 0  # and then it is unchanged


def _rewrite(path: str, edit) -> None:
    """The index at ``path`` written again with ``edit(tars, cols)`` applied."""
    from wenet_lhotse.formats.shard_index import ShardIndex, write_columns

    ix = ShardIndex(path)
    tars = [dict(t) for t in ix.tars]
    cols = {k: np.array(v) for k, v in ix.cols.items()}
    edit(tars, cols)
    del ix
    write_columns(path, tars, ["wav"], cols, [path[:-len(".index")]])



def _damage(how: str, path: str) -> None:
    if how == "truncated":
        with open(path, "r+b") as f:
            f.truncate(os.path.getsize(path) * 2 // 3)
    elif how == "header_cut":
        with open(path, "r+b") as f:
            f.truncate(40)
    elif how == "schema":
        _rewrite(path, lambda tars, cols: cols.pop("size"))
    elif how == "first_into_other_tar":  # tar 1's rows said to start inside tar 0's
        _rewrite(path, lambda tars, cols: tars[1].update(first=2))
    elif how == "tar_column":
        def edit(tars, cols):
            cols["tar"][:] = 0
        _rewrite(path, edit)


@pytest.mark.parametrize("how", ["truncated", "header_cut", "schema", "first_into_other_tar",
                                 "tar_column"])
def test_a_damaged_index_is_named_and_rebuilt_by_a_plain_rerun(indexed, how):
    from wenet_lhotse.formats.shard_index import ShardIndex
    from wenet_lhotse.sources.indexed_shards import open_shard_index

    _damage(how, indexed["index"])
    with pytest.raises(WenetDataError) as e:
        # not a skip: an error
        open_shard_index([indexed["list"]], "auto", policy=ReadPolicy(strict=False))
    msg = str(e.value)
    assert msg.startswith(f"{indexed['index']}: damaged shard index") and "\n" not in msg
    assert "wenet-lhotse index" in msg
    if how != "header_cut":
        assert f"wenet-lhotse index {indexed['list']}" in msg
    res = cli("index", indexed["list"], check=0)  # the documented command repairs it
    assert "Traceback" not in res.stderr
    ix = ShardIndex(indexed["index"])
    assert ix.n == 8 and [t["first"] for t in ix.tars] == [0, 4]


# ---------------------------------------------------------------------- the low items


def test_nemo_files_of_one_name_in_two_directories_get_two_ids(corpus, tmp_path):
    import shutil

    from wenet_lhotse.sources import open_cuts

    wav = json.loads(corpus.data_list.read_text(encoding="utf-8").splitlines()[0])["wav"]
    for d in ("x", "y"):
        (tmp_path / d).mkdir()
        shutil.copy(wav, tmp_path / d / "a.wav")
    path = tmp_path / "manifest.json"
    lines = [{"audio_filepath": f"{d}/a.wav", "duration": 1.0, "text": "t"} for d in "xy"]
    lines.append({"audio_filepath": str(tmp_path / "x" / "a.wav"), "duration": 1.0,
                  "text": "t", "offset": 0.0})
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    ids = [c.id for c in open_cuts(path)[0]]
    assert ids[:2] == ["x/a", "y/a"]
    assert ids[2].startswith("a-") and ids[2].endswith("-0-1000") and len(set(ids)) == 3


@pytest.mark.parametrize("args", [["--max-duration", "inf"], ["--max-duration", "-5"],
                                  ["--max-duration", "nan"], ["--num-buckets", "-1"],
                                  ["--num-cuts", "0"], ["--max-tokens", "-3"]])
def test_estimate_bins_refuses_bad_numbers_naming_the_option(corpus, args):
    res = cli("estimate-bins", corpus.data_list, "--units", corpus.units, *args)
    assert res.returncode == 2, res.stdout + res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and args[0] in lines[0] and "Traceback" not in res.stderr


def test_a_full_disk_names_the_file_being_written(corpus, tmp_path):
    import resource
    import signal

    def limit():  # a file size limit: writes past it fail with EFBIG, as ENOSPC would
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (512, 512))

    out = tmp_path / "cuts.jsonl.gz"
    res = cli("import", corpus.data_list, "-o", out, preexec_fn=limit)
    assert res.returncode == 1, res.stdout + res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and str(out) in lines[0] and "File too large" in lines[0], \
        res.stderr
    assert os.listdir(tmp_path) == []  # the temporary file removed


def test_a_streamed_state_with_more_batches_than_consumed_is_refused():
    from wenet_lhotse.loader.state_check import StateError, check_loader_state

    good = {"epoch": 0, "consumed": 4, "per_worker": {"0": 2, "1": 2}, "last_worker": 1}
    check_loader_state(good, "streamed", num_workers=2)
    for per_worker in ({"0": 10 ** 6}, {"0": 3, "1": 3}):
        with pytest.raises(StateError, match=r"per_worker") as e:
            check_loader_state({**good, "per_worker": per_worker}, "streamed", num_workers=2)
        assert "\n" not in str(e.value)
    with pytest.raises(StateError, match=r"out of range \[0, 4\]"):
        check_loader_state({**good, "per_worker": {"0": 10 ** 6}}, "streamed", 2)


@pytest.fixture(scope="module")
def text_env(corpus, tmp_path_factory):
    from wenet_lhotse.text.tokenizer import CharTokenizer

    root = tmp_path_factory.mktemp("text")
    chars = [line.split()[0] for line in corpus.units.read_text(encoding="utf-8").splitlines()
             if not line.startswith("<")]
    return {"root": root, "chars": chars, "tok": CharTokenizer(corpus.units), "corpus": corpus}


class _Keys:
    def __getitem__(self, cuts):
        return {"keys": [c.id for c in cuts]}


def _text_loader(env, path, **lconf):
    from wenet_lhotse.loader.build import build_dataloader

    conf = {"batch_conf": {"batch_type": "static", "batch_size": 3},
            "lhotse_conf": {"num_buckets": 2, "max_tokens_in_batch": 64, **lconf}}
    src = [{"path": str(env["corpus"].data_list), "type": "raw", "weight": 2},
           {"path": str(path), "type": "text", "weight": 1}]
    return build_dataloader(src, env["tok"], conf, "train", dataset=_Keys(), seed=0)[1]


@pytest.mark.parametrize("n", [1, 2, 3])
def test_a_text_source_of_1_to_3_lines_trains(text_env, n):
    c = text_env["chars"]
    path = text_env["root"] / f"few{n}.txt"
    path.write_text("".join(c[i] + c[i + 1] + "\n" for i in range(n)), encoding="utf-8")
    keys = [k for b in _text_loader(text_env, path) for k in b["keys"]]
    assert sorted(k for k in keys if k.startswith("few")) == \
        [f"few{n}.txt:{i}" for i in range(1, n + 1)]


def test_a_text_source_mixing_txt_and_pairs_is_one_line_naming_the_line(text_env):
    c = text_env["chars"]
    path = text_env["root"] / "mixed.jsonl"
    path.write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in [
        {"txt": c[1] + c[2]}, {"txt": c[3]}, {"src": c[1], "tgt": c[2]}, {"txt": c[4]}]),
        encoding="utf-8")
    with pytest.raises(WenetDataError) as e:
        list(_text_loader(text_env, path))
    assert str(e.value).startswith(f"{path}:3: a 'src'/'tgt' line in a source of 'txt'")
    # fault-tolerant: that line skipped and counted, the others trained
    from wenet_lhotse.sources.text import read_text_source

    report = SkipReport()
    items, stats = read_text_source([str(path)], text_env["tok"],
                                    policy=ReadPolicy(strict=False, skip_report=report))
    assert len(items) == 3 and stats.bad == 1
    assert [(s.line, s.kind) for s in report.items] == [(3, "mixed")]


def test_deep_json_in_a_fault_tolerant_text_source_is_a_counted_skip(text_env):
    from wenet_lhotse.sources.text import read_text_source

    c = text_env["chars"]
    path = text_env["root"] / "deep.jsonl"
    path.write_text(json.dumps({"txt": c[1]}) + "\n" + "[" * 100000 + "]" * 100000 + "\n" +
                    json.dumps({"txt": c[2]}) + "\n", encoding="utf-8")
    report = SkipReport()
    items, _ = read_text_source([str(path)], text_env["tok"],
                                policy=ReadPolicy(strict=False, skip_report=report))
    assert len(items) == 2 and [(s.line, s.kind) for s in report.items] == [(2, "json")]
    with pytest.raises(WenetDataError, match=r"deep\.jsonl:2: invalid JSON: nested too deeply"):
        read_text_source([str(path)], text_env["tok"])


def test_a_streamed_epoch_with_every_cut_filtered_raises_like_map_mode(corpus, tmp_path):
    from lhotse import CutSet

    from wenet_lhotse.formats import write_wenet_shards
    from wenet_lhotse.loader.build import build_dataloader
    from wenet_lhotse.text.tokenizer import CharTokenizer

    lst = write_wenet_shards(CutSet.from_cuts(list(read_raw_list(corpus.data_list))[:6]),
                             tmp_path / "sh", shard_size=3, list_path=tmp_path / "s.list")
    tok = CharTokenizer(corpus.units)
    for mode, source in (("streamed", {"path": str(lst), "type": "shard"}),
                         ("map", {"path": str(corpus.data_list), "type": "raw"})):
        conf = {"filter_conf": {"max_length": 1}, "batch_conf": {"batch_type": "static",
                                                                 "batch_size": 3},
                "lhotse_conf": {"num_buckets": 2, "mode": mode}}
        with pytest.raises(ValueError, match=r"no cuts .*\(after filter_conf\)") as e:
            list(build_dataloader(source, tok, conf, "train", dataset=_Keys(), seed=0)[1])
        assert "\n" not in str(e.value)
    conf["filter_conf"] = {}
    conf["lhotse_conf"]["mode"] = "streamed"
    loader = build_dataloader({"path": str(lst), "type": "shard"}, tok, conf, "train",
                              dataset=_Keys(), seed=0)[1]
    assert sum(len(b["keys"]) for b in loader) == 6  # unfiltered: trains as before
