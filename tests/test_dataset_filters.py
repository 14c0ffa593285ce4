"""WeNet's filter_conf on cut metadata: boundary values, laziness, no audio read."""

from __future__ import annotations

import pickle

import pytest
from lhotse import CutSet
from lhotse.utils import fastcopy

from wenet_lhotse.dataset import (
    FilterConf,
    filter_reason,
    filter_stats,
    num_frames_10ms,
    wenet_filter,
)
from wenet_lhotse.text import CharTokenizer


@pytest.fixture(scope="module")
def cuts(corpus_cuts):
    return corpus_cuts


@pytest.fixture(scope="module")
def tok(corpus):
    return CharTokenizer(corpus.units)


def one_second_cut(cuts, text):
    """A real 1.000 s cut (16000 samples = exactly 100 frames) with ``text``."""
    cut = cuts[0].truncate(duration=1.0)
    sup = fastcopy(cut.supervisions[0], text=text, duration=1.0)
    return fastcopy(cut, supervisions=[sup])


def test_num_frames_from_samples(cuts):
    for cut in cuts:
        assert num_frames_10ms(cut) == cut.recording.num_samples / 16000 * 100
    assert num_frames_10ms(one_second_cut(cuts, "ab")) == 100.0


def test_defaults_are_wenet_processor_defaults():
    conf = FilterConf()
    assert conf.to_dict() == dict(max_length=10240, min_length=10, token_max_length=200,
                                  token_min_length=1, min_output_input_ratio=0.0005,
                                  max_output_input_ratio=1)
    with pytest.raises(ValueError, match="max_len"):
        FilterConf.from_dict({"max_len": 3})


@pytest.mark.parametrize("conf, reason", [
    ({"min_length": 100}, None),            # exactly at the bound: kept
    ({"min_length": 100.001}, "too_short"),
    ({"max_length": 100}, None),
    ({"max_length": 99.999}, "too_long"),
    ({"token_min_length": 5}, None),        # "ab cd" -> 5 tokens (a b ▁ c d)
    ({"token_min_length": 6}, "too_few_tokens"),
    ({"token_max_length": 5}, None),
    ({"token_max_length": 4}, "too_many_tokens"),
    ({"min_output_input_ratio": 0.05}, None),   # 5 tokens / 100 frames
    ({"min_output_input_ratio": 0.051}, "ratio_too_low"),
    ({"max_output_input_ratio": 0.05}, None),
    ({"max_output_input_ratio": 0.049}, "ratio_too_high"),
])
def test_boundaries(cuts, tok, conf, reason):
    cut = one_second_cut(cuts, "ab cd")
    full = {"min_length": 0, "max_length": 40960, **conf}
    assert filter_reason(cut, tok, full) == reason
    kept = list(wenet_filter(CutSet.from_cuts([cut]), tok, full))
    assert len(kept) == (1 if reason is None else 0)


def test_length_checked_before_tokens_and_no_text(cuts, tok):
    cut = one_second_cut(cuts, "")
    # 0 tokens but too long first: WeNet's order of checks
    assert filter_reason(cut, tok, {"max_length": 50}) == "too_long"
    assert filter_reason(cut, tok, {}) == "too_few_tokens"
    # no transcript (inference) or no tokenizer: token limits are not checked
    unlabeled = fastcopy(cut, supervisions=[])
    assert filter_reason(unlabeled, tok, {}) is None
    assert filter_reason(cut, None, {}) is None


def test_tokens_counted_after_unk_handling(cuts):
    # a table without <unk> drops unknown tokens, and the filter counts ids like WeNet
    table = {"<blank>": 0, "a": 1, "<sos/eos>": 2}
    tok = CharTokenizer(table)
    assert filter_reason(one_second_cut(cuts, "zz"), tok, {}) == "too_few_tokens"
    assert filter_reason(one_second_cut(cuts, "za"), tok, {}) is None


def test_lazy_filter_on_corpus_reads_no_audio(cuts, tok, tmp_path):
    # Point every recording at a missing file: filtering must still work (metadata only).
    gone = CutSet.from_cuts(
        fastcopy(c, recording=fastcopy(c.recording, sources=[
            fastcopy(c.recording.sources[0], source=str(tmp_path / f"missing-{i}.wav"))]))
        for i, c in enumerate(cuts))
    conf = {"min_length": 0, "max_length": 250, "token_max_length": 200}
    path = tmp_path / "cuts.jsonl.gz"
    gone.to_file(path)
    lazy = CutSet.from_file(path)  # lazy manifest
    filtered = wenet_filter(lazy, tok, conf)
    assert filtered.is_lazy
    expected = [c.id for c in cuts if c.duration <= 2.5]
    assert 0 < len(expected) < len(cuts)
    assert [c.id for c in filtered] == expected
    stats = filter_stats(lazy, tok, conf)
    assert stats["kept"] == len(expected)
    assert stats["too_long"] == len(cuts) - len(expected)
    # the predicate travels to DataLoader workers
    pickle.loads(pickle.dumps(filtered))
