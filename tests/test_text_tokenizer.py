"""WeNet's tokenizer rules on WeNet-style symbol tables (char and BPE)."""

from __future__ import annotations

import logging
import pickle

import pytest
from guards import guarded_import

from wenet_lhotse.errors import WenetDataError
from wenet_lhotse.text import (
    BpeTokenizer,
    CharTokenizer,
    read_non_lang_symbols,
    read_symbol_table,
    tokenizer_from_wenet_conf,
)

# Recent recipes: specials first.
SPECIALS_FIRST = ["<blank>", "<unk>", "<sos/eos>", "▁", "a", "b", "c", "你", "好",
                  "{NOISE}", "[LAUGH]", "A", "B", "C", "hello", "world"]
# Classic layout: <sos/eos> last, no "你" (unknown).
SOS_LAST = ["<blank>", "<unk>", "▁", "a", "b", "c", "A", "B", "<sos/eos>"]


def write_table(path, units):
    path.write_text("".join(f"{u} {i}\n" for i, u in enumerate(units)), encoding="utf-8")
    return path


@pytest.fixture
def tables(tmp_path):
    return (write_table(tmp_path / "units_first.txt", SPECIALS_FIRST),
            write_table(tmp_path / "units_last.txt", SOS_LAST))


def test_read_symbol_table_layouts(tables):
    first, last = (read_symbol_table(p) for p in tables)
    assert first["<blank>"] == 0 and first["<unk>"] == 1 and first["<sos/eos>"] == 2
    assert last["<sos/eos>"] == len(SOS_LAST) - 1
    assert CharTokenizer(tables[0]).vocab_size() == len(SPECIALS_FIRST)
    assert CharTokenizer(tables[1]).vocab_size() == len(SOS_LAST)


def test_corpus_units_table(corpus):
    tok = CharTokenizer(corpus.units)
    table = tok.symbol_table
    # make-units' table: the special units, then the characters and ▁ in code-point order
    assert table["<blank>"] == 0 and table["<unk>"] == 1 and table["<sos/eos>"] == 2
    units = sorted(table, key=table.get)[3:]
    assert units == sorted(units) and "▁" in units
    assert max(table.values()) == tok.vocab_size() - 1
    line = corpus.data_list.read_text(encoding="utf-8").splitlines()[0]
    import json

    txt = json.loads(line)["txt"]
    tokens, ids = tok.tokenize(txt)
    assert tokens == [("▁" if ch == " " else ch) for ch in txt]
    assert 1 not in ids  # every corpus character is in units.txt


def test_bad_symbol_table_names_line(tmp_path):
    p = tmp_path / "units.txt"
    p.write_text("<blank> 0\n<unk> 1\nbroken\n", encoding="utf-8")
    with pytest.raises(WenetDataError, match=r"units\.txt:3"):
        read_symbol_table(p)
    p.write_text("<blank> zero\n", encoding="utf-8")
    with pytest.raises(WenetDataError, match=r"units\.txt:1.*not an integer"):
        read_symbol_table(p)


def test_char_space_and_unknown(tables):
    tok = CharTokenizer(tables[1])  # <sos/eos> last
    tokens, ids = tok.tokenize("  ab c你 ")
    # stripped, space -> ▁, no upper-casing without non_lang_syms
    assert tokens == ["a", "b", "▁", "c", "你"]
    assert ids == [3, 4, 2, 5, 1]  # "你" -> <unk> id 1
    text, toks = tok.detokenize(ids)
    assert toks == ["a", "b", "▁", "c", "<unk>"] and text == "ab▁c<unk>"


def test_unknown_dropped_without_unk(caplog):
    tok = CharTokenizer({"<blank>": 0, "a": 1, "▁": 2, "<sos/eos>": 3})
    with caplog.at_level(logging.WARNING, logger="wenet_lhotse.text.tokenizer"):
        assert tok.tokenize("a x a y")[1] == [1, 2, 2, 1, 2]
        assert tok.tokenize("zz")[1] == []
    warnings = [r for r in caplog.records if "dropped" in r.getMessage()]
    assert len(warnings) == 1  # once per tokenizer


def test_custom_unk_symbol():
    tok = CharTokenizer({"<blank>": 0, "<UNK>": 7, "a": 1}, unk="<UNK>")
    assert tok.tokenize("ab")[1] == [1, 7]


def test_non_lang_syms_upper_and_spans(tmp_path, tables):
    nls = tmp_path / "non_lang.txt"
    nls.write_text("{NOISE}\n[LAUGH]\n", encoding="utf-8")
    assert read_non_lang_symbols(nls) == ["{NOISE}", "[LAUGH]"]
    tok = CharTokenizer(tables[0], non_lang_syms=nls)
    tokens, ids = tok.tokenize("a {noise} b c [laugh]<x>")
    # upper-cased; listed spans whole; spaces next to spans stripped; an unlisted
    # <...> span is split into characters
    assert tokens == ["A", "{NOISE}", "B", "▁", "C", "[LAUGH]", "<", "X", ">"]
    t = tok.symbol_table
    assert ids == [t["A"], t["{NOISE}"], t["B"], t["▁"], t["C"], t["[LAUGH]"], 1, 1, 1]


def test_non_lang_syms_list_and_empty_list_upper(tables):
    assert CharTokenizer(tables[0], non_lang_syms=["{NOISE}"]).text2tokens("a{noise}") == [
        "A", "{NOISE}"]
    # WeNet upper-cases whenever non_lang_syms is given, even an empty list
    assert CharTokenizer(tables[0], non_lang_syms=[]).text2tokens("ab") == ["A", "B"]
    assert CharTokenizer(tables[0]).text2tokens("ab") == ["a", "b"]


def test_bad_non_lang_symbol_names_line(tmp_path):
    p = tmp_path / "nls.txt"
    p.write_text("{NOISE}\nNOISE\n", encoding="utf-8")
    with pytest.raises(WenetDataError, match=r"nls\.txt:2"):
        read_non_lang_symbols(p)


def test_split_with_space(tables):
    tok = CharTokenizer(tables[0], split_with_space=True, connect_symbol=" ")
    tokens, ids = tok.tokenize("hello world")
    assert tokens == ["hello", "world"] and ids == [14, 15]
    assert tok.detokenize(ids)[0] == "hello world"
    # WeNet splits on single spaces: a double space yields an empty (unknown) token
    assert tok.tokenize("hello  world") == (["hello", "", "world"], [14, 1, 15])


def test_ids2tokens_unknown_id(tables):
    with pytest.raises(KeyError, match="999"):
        CharTokenizer(tables[0]).ids2tokens([0, 999])


def test_factory_char(tables, tmp_path):
    nls = tmp_path / "nls.txt"
    nls.write_text("{NOISE}\n", encoding="utf-8")
    conf = {"tokenizer": "char", "tokenizer_conf": {
        "symbol_table_path": str(tables[0]), "non_lang_syms_path": str(nls),
        "split_with_space": False, "connect_symbol": ""}}
    tok = tokenizer_from_wenet_conf(conf)
    assert isinstance(tok, CharTokenizer) and not isinstance(tok, BpeTokenizer)
    assert tok.text2tokens("a{noise}") == ["A", "{NOISE}"]
    # non_lang_syms_path may be left out (WeNet yamls set it to null)
    tok = tokenizer_from_wenet_conf({"tokenizer_conf": {"symbol_table_path": str(tables[1])}})
    assert tok.vocab_size() == len(SOS_LAST)


def test_factory_errors(tables):
    with pytest.raises(ValueError, match="tokenizer_conf"):
        tokenizer_from_wenet_conf({"tokenizer": "char"})
    with pytest.raises(ValueError, match="symbol_table_path"):
        tokenizer_from_wenet_conf({"tokenizer": "char", "tokenizer_conf": {}})
    with pytest.raises(ValueError, match="bpe_path"):
        tokenizer_from_wenet_conf({"tokenizer": "bpe",
                                   "tokenizer_conf": {"symbol_table_path": str(tables[0])}})
    try:
        import wenet  # noqa: F401
    except ImportError:
        with pytest.raises(NotImplementedError, match="whisper"):
            tokenizer_from_wenet_conf({"tokenizer": "whisper", "tokenizer_conf": {}})


# ---------------------------------------------------------------- BPE


@pytest.fixture(scope="module")
def bpe(tmp_path_factory, corpus):
    spm = guarded_import("sentencepiece", extra="bpe")
    d = tmp_path_factory.mktemp("bpe")
    text = d / "train.txt"
    lines = corpus.text.read_text(encoding="utf-8").splitlines()
    # WeNet trains its BPE on upper-cased text (it upper-cases before encoding)
    text.write_text("\n".join(ln.split(" ", 1)[1].upper() for ln in lines) + "\n",
                    encoding="utf-8")
    spm.SentencePieceTrainer.train(
        input=str(text), model_prefix=str(d / "bpe"), vocab_size=40, model_type="bpe",
        character_coverage=1.0, hard_vocab_limit=False, minloglevel=2)
    sp = spm.SentencePieceProcessor()
    sp.load(str(d / "bpe.model"))
    pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    # WeNet's tools/spm_encode path: <blank> 0, <unk> 1, pieces, CJK, <sos/eos> last
    units = ["<blank>", "<unk>"] + [p for p in pieces if p not in ("<unk>", "<s>", "</s>")]
    units += ["你", "{NOISE}", "<sos/eos>"]
    table = write_table(d / "units.txt", units)
    return d / "bpe.model", table, sp


def test_bpe_cjk_and_pieces(bpe):
    model, table, sp = bpe
    tok = BpeTokenizer(model, table)
    tokens, ids = tok.tokenize("你好 abc dea 你")
    expected = ["你", "好"] + sp.encode_as_pieces(" ABC DEA ") + ["你"]
    assert tokens == expected
    t = tok.symbol_table
    assert ids == [t.get(x, 1) for x in expected] and ids[1] == 1  # 好 is unknown
    assert all(p in t for p in expected[2:-1])  # every piece is in the table
    text, _ = tok.detokenize([t[x] for x in sp.encode_as_pieces("ABC DEA")])
    assert text == "ABC DEA"


def test_bpe_non_lang_syms_and_pickle(bpe):
    model, table, sp = bpe
    tok = BpeTokenizer(model, table, non_lang_syms=["{NOISE}"])
    tokens = tok.text2tokens("abc {noise} dea")
    assert tokens == sp.encode_as_pieces("ABC ") + ["{NOISE}"] + sp.encode_as_pieces(" DEA")
    clone = pickle.loads(pickle.dumps(tok))
    assert clone.tokenize("abc {noise} dea") == tok.tokenize("abc {noise} dea")


def test_bpe_factory(bpe):
    model, table, _ = bpe
    tok = tokenizer_from_wenet_conf({"tokenizer": "bpe", "tokenizer_conf": {
        "symbol_table_path": str(table), "bpe_path": str(model), "non_lang_syms_path": None}})
    assert isinstance(tok, BpeTokenizer)
    assert tok.vocab_size() == len(read_symbol_table(table))


def test_bpe_missing_model(tmp_path, tables):
    guarded_import("sentencepiece", extra="bpe")
    with pytest.raises(FileNotFoundError, match="nope.model"):
        BpeTokenizer(tmp_path / "nope.model", tables[0])
