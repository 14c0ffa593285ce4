"""recipes/speech_text: the demo CTC model plus a text decoder trained on one mixed stream
of speech and text-only batches; per-task losses and source shares printed per epoch."""

from __future__ import annotations

import json

import pytest
from test_recipes import run_recipe


@pytest.mark.slow
def test_speech_text_recipe(tmp_path, cli_bin):
    d = run_recipe(tmp_path, cli_bin, "speech_text", "--epochs", "2", "--num_utts", "24")
    hist = json.loads((d / "exp" / "history.json").read_text())
    assert len(hist) == 2
    for epoch in hist:
        assert set(epoch["loss"]) == {"asr_ctc", "asr_decoder", "text_decoder"}
        assert epoch["batches"]["asr_ctc"] == 3  # 24 utterances, static batches of 8
        assert sum(epoch["share"].values()) == pytest.approx(1.0)
    # the decoder learns from both kinds of batch
    assert hist[1]["loss"]["text_decoder"] < hist[0]["loss"]["text_decoder"]
