import json

import pytest
from click.testing import CliRunner
from guards import guarded_import

from wenet_lhotse.cli import main
from wenet_lhotse.errors import WenetDataError
from wenet_lhotse.formats.kaldi import kaldi_dir_to_raw_list


def test_make_list_matches_wenet_make_raw_list(tmp_path, corpus):
    d = tmp_path / "data"
    d.mkdir()
    (d / "wav.scp").write_text(corpus.wav_scp.read_text(encoding="utf-8"), encoding="utf-8")
    (d / "text").write_text(corpus.text.read_text(encoding="utf-8"), encoding="utf-8")
    res = CliRunner().invoke(main, ["make-list", str(d)])
    assert res.exit_code == 0, res.output
    got = [json.loads(x) for x in (d / "data.list").read_text(encoding="utf-8").splitlines()]
    want = [json.loads(x) for x in corpus.data_list.read_text(encoding="utf-8").splitlines()]
    assert [g["key"] for g in got] == [w["key"] for w in want]
    assert all(g == {"key": w["key"], "wav": w["wav"], "txt": w["txt"]} for g, w in zip(got, want))


def test_segments_and_bad_lines(tmp_path):
    (tmp_path / "wav.scp").write_text("rec1 /a/rec1.wav\n", encoding="utf-8")
    (tmp_path / "segments").write_text("u1 rec1 0.5 2.25\nu2 rec1 3 4\n", encoding="utf-8")
    (tmp_path / "text").write_text("u1 ni hao\nu2\n", encoding="utf-8")
    out, n = kaldi_dir_to_raw_list(tmp_path / "wav.scp", tmp_path / "text", tmp_path / "l",
                                   segments=tmp_path / "segments")
    lines = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]
    assert n == 2 and lines[0] == {"key": "u1", "wav": "/a/rec1.wav", "txt": "ni hao",
                                   "start": 0.5, "end": 2.25}
    assert lines[1]["txt"] == "" and lines[1]["start"] == 3.0
    (tmp_path / "text").write_text("u1 a\nu3 b\n", encoding="utf-8")
    with pytest.raises(WenetDataError, match=r"text:2: key 'u3'"):
        kaldi_dir_to_raw_list(tmp_path / "wav.scp", tmp_path / "text", tmp_path / "l2",
                              segments=tmp_path / "segments")
    assert not (tmp_path / "l2").exists()  # atomic: nothing half-written
    (tmp_path / "wav.scp").write_text("rec1\n", encoding="utf-8")
    with pytest.raises(WenetDataError, match=r"wav.scp:1: expected 2 fields"):
        kaldi_dir_to_raw_list(tmp_path / "wav.scp", tmp_path / "text", tmp_path / "l3")


def test_make_units_wenet_layout(tmp_path, corpus):
    out = tmp_path / "lang_char.txt"
    res = CliRunner().invoke(main, ["make-units", str(corpus.text), "-o", str(out)])
    assert res.exit_code == 0, res.output
    table = [line.split() for line in out.read_text(encoding="utf-8").splitlines()]
    assert table[:3] == [["<blank>", "0"], ["<unk>", "1"], ["<sos/eos>", "2"]]
    units = [u for u, _ in table[3:]]
    assert units == sorted(units) and "▁" in units
    chars = set("".join(t.split(maxsplit=1)[1] for t in corpus.text.read_text().splitlines()))
    assert set(units) == (chars - {" "}) | {"▁"}


def test_make_units_bpe_encodes_every_transcript(tmp_path, corpus):
    guarded_import("sentencepiece")
    from wenet_lhotse.text import BpeTokenizer

    out = tmp_path / "units.txt"
    res = CliRunner().invoke(main, ["make-units", str(corpus.text), "-o", str(out),
                                    "--bpe", "30", "--bpe-model-prefix", str(tmp_path / "bpe")])
    assert res.exit_code == 0, res.output
    table = [line.split() for line in out.read_text(encoding="utf-8").splitlines()]
    assert table[0] == ["<blank>", "0"] and table[2] == ["<sos/eos>", "2"]
    tok = BpeTokenizer(str(tmp_path / "bpe.model"), str(out))
    unk = tok.symbol_table["<unk>"]
    for line in corpus.text.read_text(encoding="utf-8").splitlines():
        _, ids = tok.tokenize(line.split(maxsplit=1)[1])
        assert ids and unk not in ids  # every piece of the training text is in the table
