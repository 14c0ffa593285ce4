"""Raw data.list -> cuts.jsonl.gz (parallel header probing) -> raw data.list."""

from __future__ import annotations

import gzip
import json
import os

import numpy as np
import pytest
from lhotse import CutSet

from wenet_lhotse.convert import export_raw_list, import_raw, iter_raw_cuts, wenet_to_shar
from wenet_lhotse.errors import SkipReport, WenetDataError
from wenet_lhotse.formats.raw_list import read_raw_list
from wenet_lhotse.io.policy import ReadPolicy
from wenet_lhotse.sources import detect_input_kind, open_cuts


@pytest.fixture()
def rich_list(corpus, tmp_path):
    """The shared corpus' list with extra fields, a segment (start/end) and a key with / and ."""
    lines = corpus.data_list.read_text(encoding="utf-8").splitlines()
    out = []
    for i, line in enumerate(lines):
        obj = json.loads(line)
        obj["score"] = i / 10
        obj["tags"] = ["a", "b"]
        if i == 3:
            obj["start"], obj["end"] = 0.25, 0.75
        if i == 4:
            obj["key"] = "dir/sub.utt.4"
        out.append(json.dumps(obj, ensure_ascii=False))
    path = tmp_path / "data.list"
    path.write_text("\n".join(out) + "\n", encoding="utf-8")
    return path


def _lines(path):
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


@pytest.mark.parametrize("executor", ["process", "thread"])
def test_parallel_probing_matches_the_serial_reader(rich_list, executor):
    serial = [c.to_dict() for c in read_raw_list(rich_list)]
    parallel = [c.to_dict() for c in iter_raw_cuts(rich_list, num_workers=2, executor=executor)]
    assert parallel == serial and len(serial) == 20


def test_fast_serializer_matches_lhotse(rich_list):
    from wenet_lhotse.convert.raw import cut_to_dict

    for cut in read_raw_list(rich_list):
        assert json.dumps(cut_to_dict(cut)) == json.dumps(cut.to_dict())


def test_raw_to_cuts_to_raw_round_trip(rich_list, tmp_path):
    out = tmp_path / "cuts.jsonl.gz"
    res = import_raw(rich_list, out, num_workers=2)
    assert res.num_cuts == 20 and len(res.skip_report) == 0
    assert detect_input_kind(out) == "cuts"
    umask = os.umask(0o022)
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~umask  # not mkstemp's 0600
    cuts = CutSet.from_file(out).to_eager()
    orig = _lines(rich_list)
    # The recordings point at the original files: nothing was copied.
    for cut, obj in zip(cuts, orig):
        assert cut.recording.sources[0].type == "file"
        assert cut.recording.sources[0].source == obj["wav"]
    seg = cuts[orig[3]["key"]]
    assert (seg.start, seg.duration) == (0.25, 0.5)
    back = export_raw_list(out, tmp_path / "back.list")
    assert _lines(back) == orig  # same keys, wav, txt, start/end, speaker, extra fields
    assert not (tmp_path / "back_audio").exists()  # file-backed cuts need no audio copies
    seg_back = read_raw_list(back).to_eager()[seg.id]
    np.testing.assert_array_equal(seg.load_audio(), seg_back.load_audio())


def test_shar_to_raw_writes_audio_losslessly(rich_list, tmp_path):
    wenet_to_shar(rich_list, tmp_path / "shar", shard_size=8)
    back = export_raw_list(tmp_path / "shar", tmp_path / "out" / "data.list")
    lines = _lines(back)
    orig = _lines(rich_list)
    assert [x["key"] for x in lines] == [x["key"] for x in orig]
    assert all(x["wav"].startswith(str(tmp_path / "out" / "data_audio")) for x in lines)
    assert "dir%2Fsub.utt.4.flac" in {x["wav"].rsplit("/", 1)[1] for x in lines}
    strip = ("wav", "start", "end")
    assert [{k: v for k, v in x.items() if k not in strip} for x in lines] == \
        [{k: v for k, v in x.items() if k not in strip} for x in orig]
    for a, b in zip(read_raw_list(rich_list), read_raw_list(back)):
        assert a.id == b.id
        np.testing.assert_array_equal(a.load_audio(), b.load_audio())


def test_bad_lines_strict_and_fault_tolerant(corpus, tmp_path):
    good = corpus.data_list.read_text(encoding="utf-8").splitlines()
    lines = good[:3] + ["{not json", good[1], '{"key": "nowav", "txt": "x"}'] + good[3:6]
    path = tmp_path / "bad.list"
    path.write_text("\r\n".join(lines) + "\r\n\r\n", encoding="utf-8")
    with pytest.raises(WenetDataError, match=r"bad\.list:4: malformed JSON"):
        import_raw(path, tmp_path / "c.jsonl.gz", num_workers=2)
    assert not (tmp_path / "c.jsonl.gz").exists()  # atomic: nothing half written
    report = SkipReport()
    res = import_raw(path, tmp_path / "c.jsonl.gz",
                     policy=ReadPolicy(strict=False, skip_report=report),
                     num_workers=2)
    assert res.num_cuts == 6
    assert [(i.line, i.kind) for i in report] == [(4, "json"), (5, "duplicate"),
                                                  (6, "missing_field")]
    with gzip.open(tmp_path / "c.jsonl.gz", "rt") as f:
        assert len(f.readlines()) == 6


def test_open_cuts_detects_every_kind(rich_list, tmp_path):
    import_raw(rich_list, tmp_path / "c.jsonl.gz", num_workers=1)
    wenet_to_shar(rich_list, tmp_path / "shar", shard_size=10)
    (tmp_path / "shards.list").write_text("/nonexistent/shards_000000000.tar\n")
    kinds = {p.name: detect_input_kind(p) for p in
             (rich_list, tmp_path / "c.jsonl.gz", tmp_path / "shar", tmp_path / "shards.list")}
    assert kinds == {"data.list": "raw", "c.jsonl.gz": "cuts", "shar": "shar",
                     "shards.list": "shard"}
    for p in (rich_list, tmp_path / "c.jsonl.gz", tmp_path / "shar"):
        cuts, _ = open_cuts(p)
        assert [c.id for c in cuts] == [x["key"] for x in _lines(rich_list)]
