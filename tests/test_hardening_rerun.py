"""Nothing lost on rerun, values checked at the boundary (issue 12, "Data lost or not
recovered")."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import soundfile as sf
from adversarial import cli, raw_line, tar_of, utt, write_shard_list
from lhotse import CutSet

from wenet_lhotse import (
    SkipReport,
    WenetDataError,
    open_cuts,
    read_raw_list,
    read_shard_list,
    wenet_to_shar,
)
from wenet_lhotse.corpus import generate_corpus
from wenet_lhotse.io.policy import ReadPolicy


@pytest.fixture(scope="module")
def corpus12(tmp_path_factory):
    """12 utterances, 4 tars of 3."""
    return generate_corpus(tmp_path_factory.mktemp("c12"), num_utterances=12,
                           min_duration=0.3, max_duration=0.6, shard_size=3, seed=31)


def shar_ids(out):
    return [c.id for c in CutSet.from_shar(in_dir=out)]


def copy_list(corpus, tmp_path):
    """A private copy of the corpus's tars and their list (tests damage them)."""
    tars = []
    for i, t in enumerate(corpus.shards_list.read_text().split()):
        dst = tmp_path / "in" / f"t{i}.tar"
        dst.parent.mkdir(exist_ok=True)
        shutil.copy(t, dst)
        tars.append(dst)
    lst = tmp_path / "in" / "shards.list"
    lst.write_text("".join(f"{t}\n" for t in tars))
    return lst, tars


def problems(res_stdout):
    return [ln for ln in res_stdout.splitlines() if "[" in ln and "]" in ln]


def test_shard_written_with_skips_is_recorded_and_redone(corpus12, tmp_path):
    lst, tars = copy_list(corpus12, tmp_path)
    good = tars[1].read_bytes()
    tars[1].write_bytes(good[: len(good) * 2 // 3])  # truncated: 1-2 utterances lost
    out = tmp_path / "shar"
    report = SkipReport()
    res = wenet_to_shar(lst, out, policy=ReadPolicy(strict=False, skip_report=report))
    assert res.num_shards == 4 and len(report) == 1
    lost = 12 - res.num_cuts_written
    assert lost >= 1
    # validate says which shard is short, and why
    v = cli("validate", out)
    assert v.returncode == 1
    assert any("000001" in ln and "skipped" in ln for ln in problems(v.stdout)), v.stdout
    # a tolerant rerun of the same input redoes the shard (and says it is still short)
    res = wenet_to_shar(lst, out, policy=ReadPolicy(strict=False))
    assert res.written_shards == [1] and res.skipped_shards == [0, 2, 3]
    # the input is fixed: a strict rerun redoes shard 1 and nothing is lost
    tars[1].write_bytes(good)
    res = wenet_to_shar(lst, out)
    assert res.written_shards == [1]
    assert shar_ids(out) == corpus12.keys
    assert cli("validate", out).returncode == 0


def test_raw_list_lines_skipped_go_to_their_shard(corpus12, tmp_path):
    lines = corpus12.data_list.read_text().splitlines()
    broken = lines.copy()
    broken[4] = "{oops"
    lst = tmp_path / "data.list"
    lst.write_text("\n".join(broken) + "\n")
    out = tmp_path / "shar"
    res = wenet_to_shar(lst, out, shard_size=5, policy=ReadPolicy(strict=False))
    assert res.num_cuts_written == 11
    lst.write_text("\n".join(lines) + "\n")
    res = wenet_to_shar(lst, out, shard_size=5)
    assert res.written_shards == [0] and res.skipped_shards == [1, 2]
    assert shar_ids(out) == corpus12.keys  # same as a clean run: no shift, no duplicate


def test_no_gap_in_shard_numbering(corpus12, tmp_path):
    from wenet_lhotse import CharTokenizer, build_dataloader

    lst, tars = copy_list(corpus12, tmp_path)
    tars[2].write_bytes(b"this is not a tar at all" * 40)
    out = tmp_path / "shar"
    res = cli("import", lst, "--shar", out, "--skip-errors", "-j", "2", check=0)
    assert "1 skipped" in res.stdout
    for field in ("cuts", "recording"):
        assert sorted(p.name.split(".")[1] for p in out.glob(f"{field}.*")) == [
            f"{i:06d}" for i in range(4)]
    want = sorted(corpus12.keys[:6] + corpus12.keys[9:])
    assert sorted(shar_ids(out)) == want
    conf = {"fbank_conf": {"num_mel_bins": 23}, "lhotse_conf": {"mode": "streamed"}}
    _, loader = build_dataloader(out, CharTokenizer(corpus12.units), conf, "train",
                                 num_workers=2)
    assert sorted(k for b in loader for k in b["keys"]) == want
    v = cli("validate", out)
    assert v.returncode == 1 and any("000002" in ln for ln in problems(v.stdout))


def test_duplicate_keys_across_tars(tmp_path):
    lst = write_shard_list(tmp_path, [tar_of(utt("u1") + utt("u2", 2)),
                                      tar_of(utt("u2", 5) + utt("u3", 3))])
    out = tmp_path / "shar"
    with pytest.raises(WenetDataError, match="duplicate key 'u2'") as e:
        wenet_to_shar(lst, out)
    assert e.value.kind == "duplicate"
    res = cli("import", lst, "--shar", tmp_path / "cli_shar")
    assert res.returncode == 1 and "duplicate key 'u2'" in res.stderr
    report = SkipReport()
    for jobs in (1, 2):
        res = wenet_to_shar(lst, tmp_path / f"tolerant{jobs}", num_jobs=jobs,
                            policy=ReadPolicy(strict=False, skip_report=report))
        ids = shar_ids(tmp_path / f"tolerant{jobs}")
        assert sorted(ids) == ["u1", "u2", "u3"]
    assert report.counts() == {"duplicate": 2}


@pytest.mark.parametrize("times", [{"start": float("nan")}, {"end": float("inf")},
                                   {"start": 0.0, "end": float("nan")}])
def test_non_finite_times_in_raw_lists(corpus12, tmp_path, times):
    wav = str(corpus12.root / "wav" / f"{corpus12.keys[0]}.wav")
    lst = tmp_path / "data.list"
    lst.write_text(raw_line(key="a", wav=wav, txt="x", **times) + "\n")
    with pytest.raises(WenetDataError) as e:
        list(read_raw_list(lst))
    assert (e.value.line, e.value.kind) == (1, "bad_segment")


@pytest.mark.parametrize("field,value", [("start", float("nan")), ("duration", float("inf"))])
def test_non_finite_times_in_manifests(corpus12, tmp_path, field, value):
    cuts, _ = open_cuts(corpus12.data_list)
    dicts = [c.to_dict() for c in list(cuts)[:3]]
    dicts[1][field] = value
    man = tmp_path / "cuts.jsonl"
    man.write_text("".join(json.dumps(d) + "\n" for d in dicts))
    with pytest.raises(WenetDataError) as e:
        list(open_cuts(man)[0])
    assert (e.value.source, e.value.line, e.value.kind) == (str(man), 2, "bad_segment")
    report = SkipReport()
    assert len(list(open_cuts(man, policy=ReadPolicy(strict=False, skip_report=report))[0])) == 2
    res = cli("stats", man)
    assert "nan" not in res.stdout.lower()


def test_validate_flags_non_finite_samples(corpus12, tmp_path):
    x = np.sin(np.arange(8000) / 10).astype(np.float32)
    x[100] = np.nan
    x[200] = np.inf
    wav = tmp_path / "nan.wav"
    sf.write(wav, x, 16000, subtype="FLOAT")
    lst = tmp_path / "data.list"
    lst.write_text(raw_line(key="nan", wav=str(wav), txt="x") + "\n")
    res = cli("validate", lst)
    assert res.returncode == 1 and f"{lst}:1" in res.stdout and "non-finite" in res.stdout


def test_output_equal_to_input_is_refused(corpus12, tmp_path):
    lst = tmp_path / "data.list"
    shutil.copy(corpus12.data_list, lst)
    before = lst.read_bytes()
    res = cli("import", lst, "-o", lst)
    assert res.returncode != 0 and "input" in res.stderr and lst.read_bytes() == before
    res = cli("import", lst, "-o", tmp_path / "." / "data.list")
    assert res.returncode != 0 and lst.read_bytes() == before
    cli("import", lst, "-o", tmp_path / "cuts.jsonl.gz", check=0)
    res = cli("export", tmp_path / "cuts.jsonl.gz", "-o", tmp_path / "cuts.jsonl.gz")
    assert res.returncode != 0
    assert len(CutSet.from_file(tmp_path / "cuts.jsonl.gz")) == 12


def test_read_shard_list_unchanged_for_clean_input(corpus12):
    """The checks above cost nothing on valid data: a clean list reads as before."""
    assert [c.id for c in read_shard_list(corpus12.shards_list)] == corpus12.keys


# ---------------------------------------------------------------- -o naming an input (issue 23)


@pytest.mark.parametrize("command", ["cmvn", "make-units", "make-list", "import", "export"])
def test_no_command_overwrites_its_input(corpus12, tmp_path, command):
    """The issue: cmvn, make-units and make-list overwrote their input when -o named it."""
    shutil.copytree(corpus12.root, tmp_path / "c")
    d = tmp_path / "c"
    target, args = {
        "cmvn": (d / "data.list", ["cmvn", d / "data.list", "-o", d / "data.list"]),
        "make-units": (d / "text", ["make-units", d / "text", "-o", d / "text"]),
        "make-list": (d / "text", ["make-list", d, "-o", d / "text"]),
        "import": (d / "data.list", ["import", d / "data.list", "-o", d / "data.list"]),
        "export": (d / "data.list", ["export", d / "data.list", "-o", d / "data.list"]),
    }[command]
    before = target.read_bytes()
    res = cli(*args)
    assert res.returncode != 0 and "Traceback" not in res.stderr, res.stderr
    assert "would overwrite it" in res.stderr or "input itself" in res.stderr, res.stderr
    assert target.read_bytes() == before


def test_a_second_writer_of_one_shar_dir_fails_fast(corpus12, tmp_path):
    """The issue: two concurrent `import --shar` into one directory deleted each other's
    live temporary files, and the victim's error read like bad data."""
    import subprocess
    import sys

    from adversarial import REPO
    out = tmp_path / "shar"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\n"
         "from wenet_lhotse.io.tempfiles import output_lock\n"
         f"with output_lock({str(out)!r}):\n    print('held', flush=True)\n"
         "    time.sleep(120)\n"],
        stdout=subprocess.PIPE, text=True, env={**__import__("os").environ,
                                                "PYTHONPATH": str(REPO)})
    try:
        assert holder.stdout.readline().strip() == "held"
        res = cli("import", corpus12.shards_list, "--shar", out, "-j", "1")
        assert res.returncode != 0 and "Traceback" not in res.stderr, res.stderr
        assert "another writer" in res.stderr and f"pid {holder.pid}" in res.stderr
        assert not list(out.glob("*.tar")) if out.exists() else True
    finally:
        holder.kill()
        holder.wait()
    cli("import", corpus12.shards_list, "--shar", out, "-j", "1", check=0)  # lock released
    assert sorted(shar_ids(out)) == sorted(corpus12.keys)
    assert not [p for p in out.iterdir() if "lock" in p.name]


# ---------------------------------------------------------------- reruns tied to their input


def test_a_rerun_with_other_input_rewrites_the_shards(tmp_path):
    """The issue: `import A --shar out` then `import B --shar out` said "0 utterances
    written" and out/ held none of B's data."""
    a = generate_corpus(tmp_path / "a", num_utterances=6, min_duration=0.3, max_duration=0.5,
                        shard_size=3, seed=1, prefix="A")
    b = generate_corpus(tmp_path / "b", num_utterances=6, min_duration=0.3, max_duration=0.5,
                        shard_size=3, seed=2, prefix="B")
    out = tmp_path / "out"
    for corpus in (a, b):
        res = wenet_to_shar(corpus.shards_list, out)
        assert res.num_cuts_written == 6 and sorted(shar_ids(out)) == sorted(corpus.keys)
    again = wenet_to_shar(b.shards_list, out)
    assert again.num_cuts_written == 0 and len(again.skipped_shards) == 2
    for corpus in (a, b):  # raw lists too
        res = wenet_to_shar(corpus.data_list, tmp_path / "raw", shard_size=4)
        assert sorted(shar_ids(tmp_path / "raw")) == sorted(corpus.keys)


def test_a_tar_or_line_edited_in_place_is_picked_up(corpus12, tmp_path):
    lst, tars = copy_list(corpus12, tmp_path)
    out = tmp_path / "out"
    wenet_to_shar(lst, out)
    tars[1].write_bytes(tar_of(utt("new-0") + utt("new-1", 1)))  # same path, new content
    res = wenet_to_shar(lst, out)
    assert res.written_shards == [1] and res.num_cuts_written == 2
    assert "new-0" in shar_ids(out) and corpus12.keys[3] not in shar_ids(out)
    lines = corpus12.data_list.read_text().splitlines()
    raw = tmp_path / "data.list"
    raw.write_text("\n".join(lines) + "\n")
    wenet_to_shar(raw, tmp_path / "rawout", shard_size=4)
    obj = json.loads(lines[5])
    lines[5] = json.dumps({**obj, "txt": "changed text"})
    raw.write_text("\n".join(lines) + "\n")
    res = wenet_to_shar(raw, tmp_path / "rawout", shard_size=4)
    assert res.written_shards == [1]
    cuts = {c.id: c for c in CutSet.from_shar(in_dir=tmp_path / "rawout")}
    assert cuts[obj["key"]].supervisions[0].text == "changed text"
