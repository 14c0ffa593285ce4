"""Every CLI command reports bad data, bad config, bad usage and missing files as one
line ``error: ...`` naming the file (and line) or the yaml key, exits non-zero, and
never prints a traceback."""

from __future__ import annotations

import gzip
import json

import pytest
import yaml
from click.testing import CliRunner

from wenet_lhotse.cli import main


def one_error_line(res) -> str:
    assert res.exit_code != 0, res.output
    assert "Traceback" not in res.output and "Aborted" not in res.output, res.output
    # tqdm bars (stderr) are not messages
    lines = [x for x in res.output.splitlines()
             if x.strip() and not x.lstrip("\r").startswith(("cmvn:", "to Shar", "cuts"))]
    errors = [x for x in lines if x.startswith("error: ")]
    assert len(errors) == 1 and errors[0] == lines[-1], res.output
    return errors[0]


@pytest.fixture(scope="module")
def bad(tmp_path_factory, corpus_cuts):
    """A truncated cuts.jsonl.gz, a yaml with a typo, a list with a garbled line."""
    d = tmp_path_factory.mktemp("bad")
    corpus_cuts.to_file(d / "cuts.jsonl.gz")
    data = (d / "cuts.jsonl.gz").read_bytes()
    (d / "trunc.jsonl.gz").write_bytes(data[: len(data) // 2])
    with gzip.open(d / "trunc.jsonl.gz") as f:  # really cut short
        with pytest.raises(EOFError):
            f.read()
    (d / "typo.yaml").write_text(yaml.safe_dump({"dataset_conf": {
        "fbank_conf": {"num_mel_bins": 80}, "batch_conf": {"batch_sise": 4}}}))
    (d / "good.yaml").write_text(yaml.safe_dump({"dataset_conf": {
        "fbank_conf": {"num_mel_bins": 80}}}))
    (d / "garbled.list").write_text('{"key": "a", "wav": "a.wav", "txt": "x"}\n{not json\n')
    (d / "latin1.txt").write_bytes("u1 caf\xe9\n".encode("latin-1"))
    (d / "file").write_text("x")
    return d


TRUNCATED = [
    ["stats", "{d}/trunc.jsonl.gz"],
    ["export", "{d}/trunc.jsonl.gz", "-o", "{d}/out.list"],
    ["export", "{d}/trunc.jsonl.gz", "--shards", "{d}/shards"],
    ["cmvn", "{d}/trunc.jsonl.gz", "-c", "{d}/good.yaml", "-o", "{d}/cmvn"],
]


@pytest.mark.parametrize("args", TRUNCATED, ids=lambda a: "-".join(a[:1] + a[2:3]))
def test_truncated_manifest_names_the_file(bad, args):
    res = CliRunner().invoke(main, [a.format(d=bad) for a in args])
    line = one_error_line(res)
    assert "trunc.jsonl.gz:" in line and "EOFError" in line


MISSING = [["import", "{d}/nope.list"], ["export", "{d}/nope", "-o", "{d}/x.list"],
           ["validate", "{d}/nope"], ["stats", "{d}/nope"], ["make-list", "{d}/nope"],
           ["make-units", "{d}/nope", "-o", "{d}/u.txt"], ["bench", "{d}/nope.yaml"],
           ["cmvn", "{d}/nope", "-c", "{d}/good.yaml", "-o", "{d}/c"],
           ["cmvn", "{d}/cuts.jsonl.gz", "-c", "{d}/nope.yaml", "-o", "{d}/c"]]


@pytest.mark.parametrize("args", MISSING, ids=lambda a: a[0])
def test_missing_file(bad, args):
    line = one_error_line(CliRunner().invoke(main, [a.format(d=bad) for a in args]))
    assert "nope" in line and "does not exist" in line


def test_config_errors_name_the_yaml_key(bad):
    for args in (["cmvn", f"{bad}/cuts.jsonl.gz", "-c", f"{bad}/typo.yaml", "-o", f"{bad}/c"],
                 ["bench", f"{bad}/typo.yaml", "--data", f"{bad}/cuts.jsonl.gz"]):
        line = one_error_line(CliRunner().invoke(main, args))
        assert line == (f"error: {bad}/typo.yaml: dataset_conf.batch_conf.batch_sise: "
                        "unknown key; did you mean batch_size?")
    (bad / "broken.yaml").write_text("dataset_conf:\n  fbank_conf: [1, 2\n")
    line = one_error_line(CliRunner().invoke(main, ["cmvn", f"{bad}/cuts.jsonl.gz", "-c",
                                                    f"{bad}/broken.yaml", "-o", f"{bad}/c"]))
    assert f"{bad}/broken.yaml:3: not valid yaml" in line


def test_data_errors_name_file_and_line(bad):
    line = one_error_line(CliRunner().invoke(main, ["import", f"{bad}/garbled.list", "-o",
                                                    f"{bad}/c.jsonl.gz", "-j", "1"]))
    assert "garbled.list:" in line and "--skip-errors" in line
    line = one_error_line(CliRunner().invoke(main, ["make-units", f"{bad}/latin1.txt", "-o",
                                                    f"{bad}/u.txt"]))
    assert line.startswith(f"error: {bad}/latin1.txt:1: not valid UTF-8")
    (bad / "d").mkdir(exist_ok=True)
    (bad / "d" / "wav.scp").write_text("u1 /a.wav\n")
    line = one_error_line(CliRunner().invoke(main, ["make-list", f"{bad}/d"]))
    assert "text" in line and "No such file" in line


def test_os_errors_name_the_path(bad):
    line = one_error_line(CliRunner().invoke(main, ["corpus", f"{bad}/file/sub", "-n", "2"]))
    assert f"{bad}/file" in line
    line = one_error_line(CliRunner().invoke(main, ["demo", "-o", f"{bad}/file/demo",
                                                    "--quick"]))
    assert f"{bad}/file/demo" in line and "Not a directory" in line
    line = one_error_line(CliRunner().invoke(main, ["cmvn", f"{bad}/cuts.jsonl.gz", "-c",
                                                    f"{bad}/good.yaml", "-o",
                                                    f"{bad}/file/cmvn"]))
    assert f"{bad}/file" in line


def test_usage_errors_are_one_line_too(bad):
    line = one_error_line(CliRunner().invoke(main, ["import", f"{bad}/cuts.jsonl.gz",
                                                    "--audio-format", "ogg"]))
    assert "'ogg' is not one of" in line and "import --help" in line
    res = CliRunner().invoke(main, ["stats", f"{bad}/cuts.jsonl.gz", "--json"])
    assert res.exit_code == 0 and json.loads(res.output)["utterances"] == 20


def test_bench_on_a_truncated_manifest_names_it(bad, corpus):
    res = CliRunner().invoke(main, ["bench", "--data", f"{bad}/trunc.jsonl.gz", "--units",
                                    str(corpus.units), "-n", "1", "--num-workers", "0"])
    line = one_error_line(res)
    assert "trunc.jsonl.gz:" in line and "EOFError" in line
