"""One checked path for every cut line (issue 23, group 1): whatever a line comes
from -- a raw list, a manifest, a Shar, a probe cache, a resume state -- it gets the
same checks, the same one-line errors and the same counted skips."""

from __future__ import annotations

import gzip
import json

import pytest
from adversarial import cli, raw_line

from wenet_lhotse import SkipReport, WenetDataError, read_raw_list
from wenet_lhotse.corpus import generate_corpus
from wenet_lhotse.formats.checks import key_problem
from wenet_lhotse.io.policy import ReadPolicy
from wenet_lhotse.sources.manifest import LazyCheckedManifest


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """6 utterances: wavs, a raw list and 3 tars of 2."""
    return generate_corpus(tmp_path_factory.mktemp("small"), num_utterances=6,
                           min_duration=0.3, max_duration=0.6, shard_size=2, seed=23)


def one_line_error(res, where: str) -> str:
    """The CLI failed with one line naming ``where`` and no traceback."""
    assert res.returncode != 0, res.stdout + res.stderr
    assert "Traceback" not in res.stderr, res.stderr
    lines = [x for x in res.stderr.splitlines() if where in x]
    assert lines, res.stderr
    return lines[0]


# ------------------------------------------------------------------ deeply nested JSON

DEEP = "[" * 100_000


def deep_raw_list(small, tmp_path):
    lines = small.data_list.read_text().splitlines()
    lst = tmp_path / "deep.list"
    lst.write_text("\n".join(lines[:2] + [DEEP] + lines[2:]) + "\n")
    return lst


def deep_manifest(small, tmp_path):
    from wenet_lhotse import read_raw_list
    lines = [json.dumps(c.to_dict()) for c in read_raw_list(small.data_list)]
    path = tmp_path / "deep.jsonl.gz"
    with gzip.open(path, "wt") as f:
        f.write("\n".join(lines[:2] + [DEEP] + lines[2:]) + "\n")
    return path


def test_deep_json_line_is_a_counted_skip_in_python(small, tmp_path):
    lst = deep_raw_list(small, tmp_path)
    with pytest.raises(WenetDataError) as e:
        list(read_raw_list(lst))
    assert (e.value.source, e.value.line, e.value.kind) == (str(lst), 3, "json")
    report = SkipReport()
    assert len(list(read_raw_list(lst, policy=ReadPolicy(strict=False, skip_report=report)))) == 6
    assert [i.line for i in report] == [3]
    man = deep_manifest(small, tmp_path)
    with pytest.raises(WenetDataError) as e:
        list(LazyCheckedManifest([man]))
    assert (e.value.line, e.value.kind) == (3, "json") and "nested" in e.value.message
    report = SkipReport()
    assert len(list(LazyCheckedManifest([man],
                                        policy=ReadPolicy(strict=False, skip_report=report)))) == 6
    assert report.counts() == {"json": 1}


@pytest.mark.parametrize("kind", ["raw", "cuts"])
@pytest.mark.parametrize("command", ["validate", "stats", "import"])
def test_deep_json_line_in_the_cli(small, tmp_path, command, kind):
    path = deep_raw_list(small, tmp_path) if kind == "raw" else deep_manifest(small, tmp_path)
    if command == "import" and kind == "cuts":
        pytest.skip("import -o refuses a cuts manifest in one line (nothing to import; "
                    "tests/test_tools_every_kind.py)")
    args = {"validate": ["validate", path], "stats": ["stats", path],
            "import": ["import", path, "-o", tmp_path / "out.jsonl.gz"]}[command]
    res = cli(*args)
    if command == "validate":  # validate lists every problem, then exits non-zero
        assert res.returncode != 0 and "Traceback" not in res.stderr
        assert f"{path}:3" in res.stdout + res.stderr
    elif command == "stats":  # stats describes what it can and counts the skip
        assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
        assert "utterances : 6" in res.stdout and "json: 1" in res.stdout
        assert f"{path}:3" in res.stderr
    else:
        assert f"{path}:3" in one_line_error(res, f"{path}:3")
    if command == "import":
        res = cli(*args, "--skip-errors")
        assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
        assert len(gzip.open(tmp_path / "out.jsonl.gz", "rt").read().splitlines()) == 6


# ------------------------------------------------------------------ keys


@pytest.mark.parametrize("key", ["./x", "a//b", "a/./b", "a/", "a/."])
def test_keys_a_tar_reader_would_normalise_are_refused(key, tmp_path, small):
    assert key_problem(key) is not None
    wav = str(small.root / "wav" / sorted(p.name for p in (small.root / "wav").iterdir())[0])
    lst = tmp_path / "k.list"
    lst.write_text(raw_line(key=key, wav=wav, txt="x") + "\n")
    with pytest.raises(WenetDataError) as e:
        list(read_raw_list(lst))
    assert e.value.kind == "unsafe_key" and e.value.line == 1
    res = cli("import", lst, "--shar", tmp_path / "shar", "-j", "1")
    assert f"{lst}:1" in one_line_error(res, f"{lst}:1")


@pytest.mark.parametrize("key", ["a/b", "a.b", "x/.hidden", "..a", "a..b/c"])
def test_ordinary_keys_still_accepted(key):
    assert key_problem(key) is None


# ------------------------------------------------------------------ 0-sample segments


def zero_segment_list(small, tmp_path):
    """The corpus's list with line 2 a segment [0.1, 0.10003) s: no sample at 16 kHz."""
    lines = small.data_list.read_text().splitlines()
    obj = json.loads(lines[1])
    lines[1] = json.dumps({**obj, "start": 0.1, "end": 0.10003})
    lst = tmp_path / "zero.list"
    lst.write_text("\n".join(lines) + "\n")
    return lst


def test_a_zero_sample_segment_is_refused_by_readers_and_writers(small, tmp_path):
    """The issue: validate flagged it, strict import --shar wrote a 0-byte FLAC."""
    lst = zero_segment_list(small, tmp_path)
    with pytest.raises(WenetDataError) as e:
        list(read_raw_list(lst))
    assert (e.value.line, e.value.kind) == (2, "bad_segment")
    res = cli("import", lst, "--shar", tmp_path / "shar", "-j", "1")
    assert f"{lst}:2" in one_line_error(res, f"{lst}:2")
    assert not list((tmp_path / "shar").glob("recording.*.tar"))
    res = cli("import", lst, "--shar", tmp_path / "shar", "-j", "1", "--skip-errors")
    assert res.returncode == 0, res.stderr
    from lhotse import CutSet
    cuts = list(CutSet.from_shar(in_dir=tmp_path / "shar"))
    assert len(cuts) == 5 and all(c.load_audio().shape[-1] > 0 for c in cuts)


def test_a_manifest_cut_of_no_sample_is_refused(small, tmp_path):
    cut = next(iter(read_raw_list(small.data_list)))
    obj = cut.to_dict()
    obj["duration"] = 1e-5  # rounds to 0 samples at 16 kHz
    obj["supervisions"][0]["duration"] = 1e-5
    for metadata_only in (False, True):
        path = tmp_path / f"m{metadata_only}.jsonl"
        path.write_text(json.dumps(obj) + "\n")
        with pytest.raises(WenetDataError) as e:
            list(LazyCheckedManifest([path], metadata_only=metadata_only))
        assert (e.value.line, e.value.kind) == (1, "bad_segment")


# ------------------------------------------------------------------ duplicate cut ids


def dup_manifest(small, tmp_path):
    """The corpus as a manifest whose line 4 repeats line 2's cut."""
    lines = [json.dumps(c.to_dict()) for c in read_raw_list(small.data_list)]
    path = tmp_path / "dup.jsonl.gz"
    with gzip.open(path, "wt") as f:
        f.write("\n".join(lines[:3] + [lines[1]] + lines[3:]) + "\n")
    return path


def test_duplicate_cut_ids_are_used_once(small, tmp_path):
    """The issue: training and cmvn used both copies; export --shards wrote a tar that
    validate rejects."""
    from wenet_lhotse.sources.positioned import JsonlReader
    path = dup_manifest(small, tmp_path)
    for light in (False, True):
        with pytest.raises(WenetDataError) as e:
            list(JsonlReader([str(path)], light=light).iter_from(0))
        assert (e.value.line, e.value.kind) == (4, "duplicate")
        report = SkipReport()
        policy = ReadPolicy(strict=False, skip_report=report)
        reader = JsonlReader([str(path)], policy=policy, light=light)
        assert [c.id for _, c in reader.iter_from(0)] == small.keys
        assert report.counts() == {"duplicate": 1}
        # resumed after line 3: the copy at line 4 is still dropped
        assert [p for p, _ in reader.iter_from(3)] == [4, 5, 6]
    report = SkipReport()
    policy = ReadPolicy(strict=False, skip_report=report)
    assert [c.id for c in LazyCheckedManifest([path], policy=policy)] == small.keys
    assert [i.line for i in report] == [4]


def test_duplicates_in_the_cli(small, tmp_path):
    path = dup_manifest(small, tmp_path)
    res = cli("export", path, "--shards", tmp_path / "tars", "-j", "1")
    assert f"{path}:4" in one_line_error(res, f"{path}:4")
    res = cli("cmvn", path, "-o", tmp_path / "cmvn.json", "-j", "1")
    assert f"{path}:4" in one_line_error(res, f"{path}:4")


def test_shar_import_refuses_non_finite_audio(small, tmp_path):
    """Writers refuse what readers refuse: float audio with NaN samples is an error in
    strict import --shar, a counted skip with --skip-errors."""
    import numpy as np
    import soundfile as sf

    from wenet_lhotse import wenet_to_shar
    pcm = np.zeros(4000, dtype=np.float32)
    pcm[10] = np.nan
    bad = tmp_path / "nan.wav"
    sf.write(bad, pcm, 16000, subtype="FLOAT")
    lines = small.data_list.read_text().splitlines()
    lines[2] = json.dumps({**json.loads(lines[2]), "wav": str(bad)})
    lst = tmp_path / "nan.list"
    lst.write_text("\n".join(lines) + "\n")
    with pytest.raises(WenetDataError) as e:
        wenet_to_shar(lst, tmp_path / "shar")
    assert e.value.line == 3 and "non-finite" in e.value.message
    report = SkipReport()
    res = wenet_to_shar(lst, tmp_path / "shar2",
                        policy=ReadPolicy(strict=False, skip_report=report))
    assert res.num_cuts_written == 5 and [i.line for i in report] == [3]
