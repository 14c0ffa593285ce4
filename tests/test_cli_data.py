"""`wenet-lhotse import | export | validate | stats`, through click's CliRunner and
as real subprocesses; and every command shown in docs/cli.md."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from lhotse import CutSet

from wenet_lhotse.cli import main
from wenet_lhotse.corpus import generate_corpus

DOCS = Path(__file__).resolve().parent.parent / "docs" / "cli.md"


def run(*args, code=0):
    res = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)
    assert res.exit_code == code, res.output
    return res


@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    return generate_corpus(tmp_path_factory.mktemp("cli"), num_utterances=12, min_duration=0.5,
                           max_duration=1.5, shard_size=5, seed=5)


@pytest.fixture()
def broken_list(corpus, tmp_path):
    good = corpus.data_list.read_text(encoding="utf-8").splitlines()
    missing = json.dumps({"key": "gone", "wav": str(tmp_path / "gone.wav"), "txt": "x"})
    path = tmp_path / "bad.list"
    path.write_text("\n".join([good[0], "{oops", good[1], missing, good[2]]) + "\n",
                    encoding="utf-8")
    return path


def test_docs_commands_run(tmp_path, monkeypatch):
    """Every `$ wenet-lhotse ...` line of docs/cli.md, in order, in an empty directory."""
    commands = [line[2:] for line in DOCS.read_text(encoding="utf-8").splitlines()
                if line.startswith("$ wenet-lhotse ")]
    assert len(commands) >= 10
    monkeypatch.chdir(tmp_path)
    for cmd in commands:
        args = shlex.split(cmd)[1:]
        res = CliRunner().invoke(main, args, catch_exceptions=False)
        assert res.exit_code == 0, f"{cmd}\n{res.output}"
    data = tmp_path / "demo_data"
    assert len(CutSet.from_file(data / "cuts.jsonl.gz")) == 30
    assert len(CutSet.from_shar(in_dir=data / "shar").to_eager()) == 30
    assert len(CutSet.from_shar(in_dir=data / "shar_from_raw").to_eager()) == 30
    assert len(CutSet.from_shar(in_dir=data / "shar_copied").to_eager()) == 30
    assert len((data / "exported" / "data.list").read_text().splitlines()) == 30
    assert len((data / "shards2.list").read_text().splitlines()) == 2
    assert (data / "stats.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_import_raw_and_shards(sharded, tmp_path):
    out = tmp_path / "cuts.jsonl.gz"
    res = run("import", sharded.data_list, "-o", out, "-j", 2)
    assert "12 utterances" in res.stdout
    assert [c.id for c in CutSet.from_file(out)] == sharded.keys
    res = run("import", sharded.shards_list, "--shar", tmp_path / "shar", "-j", 2)
    assert "3 shards: 3 written" in res.stdout
    res = run("import", sharded.shards_list, "--shar", tmp_path / "shar")
    assert "0 written, 3 already complete" in res.stdout
    assert [c.id for c in CutSet.from_shar(in_dir=tmp_path / "shar")] == sharded.keys


def test_import_usage_errors(sharded, tmp_path):
    res = run("import", sharded.shards_list, "-o", tmp_path / "x.jsonl.gz", code=2)
    assert "--shar DIR" in res.output
    res = run("import", sharded.shards_list, "--shar", tmp_path / "s", "--shard-size", 3, code=2)
    assert "--shard-size applies to raw lists" in res.output


def test_import_broken_list_strict_and_skip(broken_list, tmp_path):
    res = run("import", broken_list, "-o", tmp_path / "c.jsonl.gz", code=1)
    assert f"{broken_list}:2: malformed JSON" in res.output and "--skip-errors" in res.output
    assert not (tmp_path / "c.jsonl.gz").exists()
    res = run("import", broken_list, "-o", tmp_path / "c.jsonl.gz", "--skip-errors")
    assert "3 utterances" in res.stdout and "2 skipped" in res.stdout
    assert f"{broken_list}:4" in res.stderr


def test_export_to_raw_and_shards(sharded, tmp_path):
    run("import", sharded.shards_list, "--shar", tmp_path / "shar")
    res = run("export", tmp_path / "shar", "-o", tmp_path / "out" / "data.list")
    lines = [json.loads(x) for x in (tmp_path / "out" / "data.list").read_text().splitlines()]
    assert [x["key"] for x in lines] == sharded.keys
    assert all(Path(x["wav"]).is_file() for x in lines)
    # the Shar audio is FLAC: the export says that it wrote FLAC files (issue 32)
    adir = (tmp_path / "out" / "data_audio").absolute()
    assert all(x["wav"].endswith(".flac") for x in lines)
    assert f"audio files in {adir}: {len(lines)} FLAC (FLAC: lossless" in res.output
    run("export", tmp_path / "shar", "--shards", tmp_path / "sh", "--shard-size", 4)
    tars = (tmp_path / "sh" / "shards.list").read_text().splitlines()
    assert len(tars) == 3 and all(Path(t).is_file() for t in tars)
    res = run("export", tmp_path / "shar", code=2)
    assert "pass -o" in res.output


def test_validate_reports_file_and_line(broken_list):
    res = run("validate", broken_list, code=1)
    out = res.stdout
    assert f"{broken_list}:2: [json]" in out
    assert f"{broken_list}:4: [missing_audio]" in out
    assert "3 utterances OK" in out and "2 problems" in out
    assert "json: 1, missing_audio: 1" in out


def test_validate_finds_undecodable_audio_and_truncated_tar(sharded, corpus, tmp_path):
    import numpy as np
    import soundfile as sf

    bad = tmp_path / "bad.flac"
    sf.write(bad, np.full(8000, 0.1, dtype=np.float32), 16000)
    data = bad.read_bytes()
    bad.write_bytes(data[: len(data) // 3] + bytes(len(data) - len(data) // 3))
    lst = tmp_path / "data.list"
    lines = corpus.data_list.read_text().splitlines()[:3]
    lines.insert(1, json.dumps({"key": "garbled", "wav": str(bad), "txt": "x"}))
    lst.write_text("\n".join(lines) + "\n")
    res = run("validate", lst, code=1)
    assert f"{lst}:2: [bad_audio] 'garbled'" in res.stdout

    tars = [Path(t) for t in sharded.shards_list.read_text().split()]
    cut_tar = tmp_path / tars[1].name
    cut_tar.write_bytes(tars[1].read_bytes()[:30000])
    shards = tmp_path / "shards.list"
    shards.write_text(f"{tars[0]}\n{cut_tar}\n")
    res = run("validate", shards, code=1)
    assert f"{cut_tar}[" in res.stdout and "[truncated]" in res.stdout


def test_validate_finds_duplicate_keys_across_tars(sharded, tmp_path):
    tars = sharded.shards_list.read_text().split()
    shards = tmp_path / "shards.list"
    shards.write_text(f"{tars[0]}\n{tars[1]}\n{tars[0]}\n")
    res = run("validate", shards, code=1)
    assert "duplicate: 5" in res.stdout and "10 utterances OK" in res.stdout
    assert f"{tars[0]}[{sharded.keys[0]}]: [duplicate]" in res.stdout


def test_validate_good_inputs_exit_zero(sharded, tmp_path):
    run("validate", sharded.shards_list)
    run("import", sharded.data_list, "--shar", tmp_path / "shar", "--shard-size", 5)
    res = run("validate", tmp_path / "shar")
    assert "12 utterances OK" in res.stdout and "0 problems" in res.stdout


def test_validate_broken_manifest(corpus, tmp_path):
    out = tmp_path / "cuts.jsonl.gz"
    run("import", corpus.data_list, "-o", out, "-j", 1)
    data = out.read_bytes()
    out.write_bytes(data[: len(data) // 2])
    res = run("validate", out, code=1)
    assert "[truncated] unreadable after line" in res.stdout


def test_validate_damaged_shar(sharded, tmp_path):
    run("import", sharded.data_list, "--shar", tmp_path / "shar", "--shard-size", 5)
    tar = tmp_path / "shar" / "recording.000001.tar"
    tar.write_bytes(tar.read_bytes()[:20000])
    res = run("validate", tmp_path / "shar", code=1)
    assert str(tar) in res.stdout


def test_stats_text_json_and_plot(corpus, tmp_path):
    res = run("stats", corpus.data_list, "--plot", tmp_path / "s.png")
    assert "utterances : 20" in res.stdout and "duration (s)" in res.stdout
    assert (tmp_path / "s.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    summary = json.loads(run("stats", corpus.data_list, "--json").stdout)
    assert summary["utterances"] == 20 and summary["speakers"] == 4
    assert abs(summary["hours"] * 3600 - corpus.total_duration) < 1e-6
    d = summary["duration_s"]
    assert 1.0 <= d["min"] <= d["p50"] <= d["max"] <= 4.5


def test_real_subprocess(broken_list, corpus, tmp_path):
    exe = shutil.which("wenet-lhotse")
    cmd = [exe] if exe else [sys.executable, "-c", "from wenet_lhotse.cli import main; main()"]
    proc = subprocess.run(cmd + ["validate", str(broken_list)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert re.search(re.escape(str(broken_list)) + r":2: \[json\]", proc.stdout)
    out = tmp_path / "c.jsonl.gz"
    proc = subprocess.run(cmd + ["import", str(corpus.data_list), "-o", str(out), "-j", "2"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert len(CutSet.from_file(out)) == 20


def test_stats_plot_without_matplotlib_says_what_to_install(corpus, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib.backends.backend_agg", None)  # not importable
    res = run("stats", corpus.data_list, "--plot", tmp_path / "s.png", code=1)
    assert "plotting needs matplotlib: pip install matplotlib" in res.output
    assert "utterances : 20" in res.stdout  # the figures still came out
    assert not (tmp_path / "s.png").exists()


def test_validate_flags_an_empty_list(tmp_path):
    empty = tmp_path / "data.list"
    empty.write_text("\n", encoding="utf-8")
    res = CliRunner().invoke(main, ["validate", str(empty)])
    assert res.exit_code == 1 and "[empty] no utterances" in res.output
