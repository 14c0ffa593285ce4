"""errors: the strict/fault-tolerant decision in one place, and one-line error summaries."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import soundfile as sf

from wenet_lhotse.errors import SkipReport, WenetDataError, short_error


def test_handle_raises_when_strict_and_records_otherwise():
    err = WenetDataError("malformed JSON", "data.list", line=3, kind="json")
    report = SkipReport(log=False)
    with pytest.raises(WenetDataError, match=r"^data\.list:3: malformed JSON$"):
        report.handle(err, strict=True)
    assert len(report) == 0
    report.handle(err, strict=False)
    report.handle(WenetDataError("bad", "a.tar", member="k.wav", kind="bad_audio"), False)
    assert [i.location for i in report] == ["data.list:3", "a.tar[k.wav]"]
    assert report.counts() == {"json": 1, "bad_audio": 1}
    assert report.summary() == "2 items skipped (bad_audio: 1, json: 1)"


def test_error_keeps_its_fields_across_processes():
    err = pickle.loads(pickle.dumps(WenetDataError("x", "s.tar", member="m", kind="truncated")))
    assert (err.source, err.line, err.member, err.kind, str(err)) == (
        "s.tar", None, "m", "truncated", "s.tar[m]: x")


def test_short_error_takes_lhotse_first_backend_message():
    lhotse_like = RuntimeError(
        "Reading audio from 'x.wav' failed. Details:\n"
        "Exception #0 (<class 'lhotse.audio.backend.LibsndfileBackend'>: "
        "<class 'soundfile.LibsndfileError'>: Error opening 'x.wav': Format not recognised.\n"
        "Exception #1 (...): ...")
    assert short_error(lhotse_like) == "Error opening 'x.wav': Format not recognised."
    assert short_error(ValueError("first line\nsecond")) == "ValueError: first line"
    assert short_error(KeyError()) == "KeyError"


def test_short_error_asks_libsndfile_about_the_audio(tmp_path):
    bad = b"RIFF not really a wav"
    assert "ormat" in short_error(RuntimeError("lhotse hint"), audio=bad)  # "Format not ..."
    good = tmp_path / "ok.wav"
    sf.write(good, np.zeros(160, dtype=np.int16), 16000)
    # libsndfile reads it: the caller's own first line is the reason
    assert short_error(RuntimeError("\n decoder failed \nmore"), audio=str(good)) == \
        "decoder failed"
