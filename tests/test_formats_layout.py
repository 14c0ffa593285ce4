"""formats.layout: the WeNet item fields of a cut, read back the same way everywhere."""

from __future__ import annotations

import pytest
from lhotse import Recording, SupervisionSegment
from lhotse.utils import fastcopy

from wenet_lhotse.errors import WenetDataError
from wenet_lhotse.formats.layout import (
    cut_source,
    cut_text,
    is_whole_recording,
    whole_recording_bytes,
)


@pytest.fixture
def cut(corpus):
    wav = sorted((corpus.root / "wav").glob("*.wav"))[0]
    rec = Recording.from_file(wav, recording_id="r")
    return rec.to_cut()


def _sup(cut, text, i=0):
    return SupervisionSegment(id=f"s{i}", recording_id=cut.recording_id, start=0.0,
                              duration=cut.duration, text=text)


def test_cut_text_joins_for_writers_and_wants_one_for_the_dataset(cut):
    two = fastcopy(cut, supervisions=[_sup(cut, "a b", 0), _sup(cut, "c", 1)])
    assert cut_text(two) == "a b c"
    with pytest.raises(WenetDataError, match="has 2 supervisions") as info:
        cut_text(two, single=True)
    assert info.value.kind == "supervisions"
    assert info.value.source == str(cut.recording.sources[0].source)
    one = fastcopy(cut, supervisions=[_sup(cut, "a b")])
    assert cut_text(one, single=True) == "a b"
    assert cut_text(cut) is None and cut_text(cut, single=True) is None
    with pytest.raises(WenetDataError, match="no transcript") as info:
        cut_text(cut, single=True, required=True)
    assert info.value.kind == "missing_text"


def test_cut_source_names_file_memory_or_cut(cut):
    assert cut_source(cut) == cut.recording.sources[0].source
    with open(cut.recording.sources[0].source, "rb") as f:
        mem = Recording.from_bytes(f.read(), recording_id="m").to_cut()
    assert cut_source(mem) == "in-memory audio of recording 'm'"
    assert cut_source(fastcopy(cut, recording=None)) == f"cut {cut.id!r}"


def test_whole_recording_is_every_sample_from_zero(cut):
    assert is_whole_recording(cut)
    data, ext = whole_recording_bytes(cut)
    assert ext == "wav" and data == open(cut.recording.sources[0].source, "rb").read()
    part = cut.truncate(duration=cut.duration / 2)
    assert not is_whole_recording(part) and whole_recording_bytes(part) is None
    later = cut.truncate(offset=0.1)
    assert not is_whole_recording(later)
