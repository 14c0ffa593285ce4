"""WeNet -> Lhotse Shar conversion: round trips, lossless audio, restartability."""

from __future__ import annotations

import json
import os
import tarfile

import numpy as np
import pytest
import soundfile as sf
from lhotse import CutSet

from wenet_lhotse.convert import export_shards, shard_is_complete, wenet_to_shar
from wenet_lhotse.convert.lossless import choose_lossless_encoding, encode_lossless
from wenet_lhotse.convert.shar import partial_dir
from wenet_lhotse.corpus import generate_corpus
from wenet_lhotse.errors import SkipReport, WenetDataError
from wenet_lhotse.formats import read_shard_list, write_wenet_shards
from wenet_lhotse.formats.raw_list import read_raw_list
from wenet_lhotse.io.policy import ReadPolicy
from wenet_lhotse.sources.shar_dir import shard_paths

EXTRA = {"emotion": "calm", "domain": "synthetic"}


@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    """18 utterances in WeNet shards of 5 (4 tars) with speaker, lang and extra members."""
    root = tmp_path_factory.mktemp("sharded")
    paths = generate_corpus(root, num_utterances=18, min_duration=0.5, max_duration=1.5, seed=3)
    lines = []
    for i, line in enumerate(paths.data_list.read_text(encoding="utf-8").splitlines()):
        obj = json.loads(line)
        obj.update(EXTRA, lang="xx", take=str(i))
        lines.append(json.dumps(obj, ensure_ascii=False))
    rich = root / "rich.list"
    rich.write_text("\n".join(lines) + "\n", encoding="utf-8")
    shard_list = write_wenet_shards(read_raw_list(rich), root / "shards", shard_size=5,
                                    list_path=root / "shards.list")
    return paths, rich, shard_list


def _summary(cut):
    sup = cut.supervisions[0]
    internal = ("shard_origin", "shar_epoch")  # added by Lhotse's Shar reader
    custom = {k: v for k, v in (cut.custom or {}).items() if k not in internal}
    return cut.id, sup.text, sup.speaker, sup.language, custom, cut.sampling_rate


def _assert_same(a_cuts, b_cuts):
    a_list, b_list = list(a_cuts), list(b_cuts)
    assert [c.id for c in a_list] == [c.id for c in b_list]
    for a, b in zip(a_list, b_list):
        assert _summary(a) == _summary(b)
        np.testing.assert_array_equal(a.load_audio(), b.load_audio())


def test_shards_to_shar_to_shards_round_trip(sharded, tmp_path):
    _, _, shard_list = sharded
    res = wenet_to_shar(shard_list, tmp_path / "shar", num_jobs=2)
    assert res.num_shards == 4 and res.written_shards == [0, 1, 2, 3]
    assert res.num_cuts_written == 18 and len(res.skip_report) == 0
    source = read_shard_list(shard_list)
    shar = CutSet.from_shar(in_dir=tmp_path / "shar")
    _assert_same(source, shar)
    first = next(iter(shar))
    assert first.custom["emotion"] == "calm" and first.custom["take"] == "0"
    # One Shar shard per input tar, same utterances in the same order.
    with tarfile.open(tmp_path / "shar" / "recording.000001.tar") as tar:
        names = tar.getnames()
    assert [n for n in names if n.endswith(".flac")] == [f"{c.id}.flac" for c in
                                                         list(source)[5:10]]
    out_list = export_shards(tmp_path / "shar", tmp_path / "back", shard_size=5,
                             list_path=tmp_path / "back.list")
    _assert_same(source, read_shard_list(out_list))
    # The re-exported tars hold the same 16-bit PCM as the originals, byte for byte.
    with tarfile.open(open(shard_list).readline().strip()) as a, \
            tarfile.open(open(out_list).readline().strip()) as b:
        wav_a = {m.name: a.extractfile(m).read() for m in a if m.name.endswith(".wav")}
        wav_b = {m.name: b.extractfile(m).read() for m in b if m.name.endswith(".wav")}
    assert wav_a == wav_b


def test_raw_to_shar_keeps_spans_and_fields(sharded, tmp_path):
    _, rich, _ = sharded
    res = wenet_to_shar(rich, tmp_path / "shar", shard_size=7, num_jobs=1)
    assert res.num_shards == 3 and res.num_cuts_written == 18
    _assert_same(read_raw_list(rich), CutSet.from_shar(in_dir=tmp_path / "shar"))


def test_shard_size_rejected_for_shard_lists(sharded, tmp_path):
    with pytest.raises(ValueError, match="shard_size applies to raw lists"):
        wenet_to_shar(sharded[2], tmp_path / "shar", shard_size=3)


@pytest.mark.parametrize("subtype", ["PCM_16", "PCM_24", "FLOAT"])
def test_lossless_audio_is_bit_exact(tmp_path, subtype):
    rng = np.random.default_rng(0)
    x = np.clip(rng.normal(0, 0.3, 8000), -1, 0.999).astype(np.float32)
    wav = tmp_path / "a.wav"
    sf.write(wav, x, 8000, subtype=subtype)
    source, _ = sf.read(wav, dtype="float32")
    lst = tmp_path / "data.list"
    lst.write_text(json.dumps({"key": "k/a.b", "wav": str(wav), "txt": "t"}) + "\n")
    wenet_to_shar(lst, tmp_path / "shar")
    cut = next(iter(CutSet.from_shar(in_dir=tmp_path / "shar")))
    assert cut.id == "k/a.b"
    np.testing.assert_array_equal(cut.load_audio()[0], source)
    expected_ext = {"PCM_16": "flac", "PCM_24": "flac", "FLOAT": "wav"}[subtype]
    assert choose_lossless_encoding(source[None])[2] == expected_ext
    if subtype != "PCM_16":
        # Why "lossless" exists: Lhotse's own "flac" writer stores 16 bits.
        wenet_to_shar(lst, tmp_path / "lhotse_flac", audio_format="flac")
        lossy = next(iter(CutSet.from_shar(in_dir=tmp_path / "lhotse_flac"))).load_audio()[0]
        assert not np.array_equal(lossy, source)


def test_encode_lossless_multichannel_16bit():
    x = (np.arange(-400, 400, dtype=np.float32).reshape(2, 400) / 32768.0)
    data, ext = encode_lossless(x, 16000)
    import io

    back, _ = sf.read(io.BytesIO(data), dtype="float32")
    assert ext == "flac"
    np.testing.assert_array_equal(back.T, x)


def _mtimes(out):
    return {p.name: p.stat().st_mtime_ns for p in sorted(out.iterdir())}


def test_rerun_rewrites_only_missing_or_damaged_shards(sharded, tmp_path):
    _, _, shard_list = sharded
    out = tmp_path / "shar"
    wenet_to_shar(shard_list, out, num_jobs=2)
    before = _mtimes(out)
    assert len(before) == 8
    # Shard 1: its manifest deleted. Shard 2: its tar cut short. Plus leftovers of
    # an interrupted run in the temporary directory.
    os.remove(shard_paths(out, 1)[0])
    tar2 = shard_paths(out, 2)[1]
    tar2.write_bytes(tar2.read_bytes()[: tar2.stat().st_size // 2])
    stale = partial_dir(out) / "shard-000003-99999"
    stale.mkdir(parents=True)
    (stale / "cuts.000003.jsonl.gz").write_bytes(b"half")
    assert not shard_is_complete(out, 1) and not shard_is_complete(out, 2)
    assert shard_is_complete(out, 0) and shard_is_complete(out, 3)

    res = wenet_to_shar(shard_list, out, num_jobs=2)
    assert res.written_shards == [1, 2] and res.skipped_shards == [0, 3]
    after = _mtimes(out)
    assert set(after) == set(before)
    rewritten = {n for n in after if after[n] != before[n]}
    assert rewritten == {"cuts.000001.jsonl.gz", "recording.000001.tar",
                         "cuts.000002.jsonl.gz", "recording.000002.tar"}
    assert not partial_dir(out).exists()
    _assert_same(read_shard_list(shard_list), CutSet.from_shar(in_dir=out))
    # A third run has nothing to do.
    assert wenet_to_shar(shard_list, out).written_shards == []


def test_failed_shard_leaves_nothing_visible(sharded, tmp_path):
    paths, _, _ = sharded
    bad = tmp_path / "bad.flac"
    sf.write(bad, np.zeros(8000, dtype=np.float32) + 0.1, 16000)
    data = bad.read_bytes()  # valid header, garbage frames: fails only when decoded
    bad.write_bytes(data[: len(data) // 3] + bytes(len(data) - len(data) // 3))
    lines = paths.data_list.read_text().splitlines()
    lines.insert(7, json.dumps({"key": "broken", "wav": str(bad), "txt": "x"}))
    lst = tmp_path / "data.list"
    lst.write_text("\n".join(lines) + "\n")
    out = tmp_path / "shar"
    with pytest.raises(WenetDataError, match=r"data\.list:8: .*'broken'"):
        wenet_to_shar(lst, out, shard_size=5, num_jobs=1)
    # Shard 0 was committed; shard 1 (holding the broken utterance) left nothing behind.
    assert shard_is_complete(out, 0)
    assert not any(p.name.split(".")[1] == "000001" for p in out.iterdir())
    assert not partial_dir(out).exists()
    assert len(CutSet.from_shar(in_dir=out).to_eager()) == 5
    # Fault-tolerant rerun: only the bad utterance is left out, and it is reported.
    report = SkipReport()
    res = wenet_to_shar(lst, out, shard_size=5, policy=ReadPolicy(strict=False, skip_report=report))
    assert res.skipped_shards == [0]
    assert [(i.kind, i.line) for i in report] == [("bad_audio", 8)]
    ids = [c.id for c in CutSet.from_shar(in_dir=out)]
    assert ids == paths.keys


def test_copy_format_stores_original_bytes(sharded, tmp_path):
    paths, rich, shard_list = sharded
    res = wenet_to_shar(shard_list, tmp_path / "shar", audio_format="copy", num_jobs=2)
    assert res.num_cuts_written == 18
    _assert_same(read_shard_list(shard_list), CutSet.from_shar(in_dir=tmp_path / "shar"))
    with tarfile.open(open(shard_list).readline().strip()) as src, \
            tarfile.open(tmp_path / "shar" / "recording.000000.tar") as dst:
        a = {m.name: src.extractfile(m).read() for m in src if m.name.endswith(".wav")}
        b = {m.name: dst.extractfile(m).read() for m in dst if m.name.endswith(".wav")}
    assert a == b and len(a) == 5  # the very same WAV bytes
    # A segment (start/end) is not a whole file: it falls back to lossless encoding.
    lines = rich.read_text().splitlines()
    seg = json.loads(lines[0])
    seg.update(start=0.1, end=0.4)
    lst = tmp_path / "seg.list"
    lst.write_text(json.dumps(seg) + "\n" + lines[1] + "\n")
    wenet_to_shar(lst, tmp_path / "seg_shar", audio_format="copy")
    with tarfile.open(tmp_path / "seg_shar" / "recording.000000.tar") as tar:
        names = [n for n in tar.getnames() if not n.endswith(".json")]
    keys = [json.loads(x)["key"] for x in lst.read_text().splitlines()]
    assert names == [f"{keys[0]}.flac", f"{keys[1]}.wav"]
    _assert_same(read_raw_list(lst), CutSet.from_shar(in_dir=tmp_path / "seg_shar"))
