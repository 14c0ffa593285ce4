"""sources.text: text-only sources read, tokenized, filtered; bad lines named."""

from __future__ import annotations

import gzip
import json

import pytest

from wenet_lhotse import CharTokenizer
from wenet_lhotse.errors import SkipReport, WenetDataError
from wenet_lhotse.io.policy import ReadPolicy
from wenet_lhotse.sources.text import item_key, read_text_source


@pytest.fixture(scope="module")
def tok(corpus):
    return CharTokenizer(corpus.units)


def _chars(corpus):
    return [line.split()[0] for line in corpus.units.read_text(encoding="utf-8").splitlines()
            if not line.startswith("<")]


def test_plain_gzip_text_tokenized_and_filtered(corpus, tok, tmp_path):
    ch = _chars(corpus)
    lines = [ch[0] * 3, "", ch[1] * 250, ch[2] * 5]
    path = tmp_path / "lm.txt.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    items, stats = read_text_source([str(path)], tok, name="lm", tags={"task": "lm"},
                                    filter_conf={"token_max_length": 200})
    assert [i.text for i in items] == [lines[0], lines[3]]
    assert [item_key(i) for i in items] == ["lm:1", "lm:4"]  # file line numbers
    assert list(items[0].tokens) == tok.tokenize(lines[0])[1]
    assert items[0].custom["task"] == "lm"
    assert stats.lines == 4 and stats.kept == 2 and stats.blank == 1
    assert stats.filtered == {"too_many_tokens": 1}


def test_jsonl_text_and_pairs(corpus, tok, tmp_path):
    ch = _chars(corpus)
    rows = [{"txt": ch[0] * 2, "key": "k1"}, {"src": ch[1] * 4, "tgt": ch[2] * 3}]
    paths = []  # one kind per file: a file mixing them is refused (test_hardening_bounds)
    for i, row in enumerate(rows):
        paths.append(tmp_path / f"mt{i}.jsonl")
        paths[-1].write_text(json.dumps(row, ensure_ascii=False) + "\n", encoding="utf-8")
    items, _ = read_text_source([str(p) for p in paths], tok, name="mt")
    assert item_key(items[0]) == "k1" and items[0].num_tokens == 2
    pair = items[1]
    assert (pair.source.text, pair.target.text) == (rows[1]["src"], rows[1]["tgt"])
    assert list(pair.target.tokens) == tok.tokenize(rows[1]["tgt"])[1]


def test_bad_lines_named_or_counted(corpus, tok, tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b'{"txt": "a"}\n{"nope": 1}\n{not json\n\xff\xfe\n')
    with pytest.raises(WenetDataError, match=r"bad\.jsonl:2: needs 'txt'"):
        read_text_source([str(path)], tok, name="bad")
    report = SkipReport(log=False)
    items, stats = read_text_source([str(path)], tok, name="bad",
                                    policy=ReadPolicy(strict=False, skip_report=report))
    assert len(items) == 1 and stats.bad == 3
    assert [(i.line, i.kind) for i in report.items] == [(2, "missing_field"), (3, "json"),
                                                        (4, "encoding")]


def test_text_from_object_storage(corpus, tok, s3, tmp_path):
    """A gzipped text file on a (moto) S3 server, read through io.remote."""
    ch = _chars(corpus)
    local = tmp_path / "up"
    local.mkdir()
    with gzip.open(local / "lm.txt.gz", "wt", encoding="utf-8") as f:
        f.write(ch[0] * 2 + "\n" + ch[1] * 3 + "\n")
    url = s3.put_dir(local, "text") + "/lm.txt.gz"
    items, stats = read_text_source([url], tok, name="s3lm")
    assert [i.num_tokens for i in items] == [2, 3] and stats.kept == 2
