"""WeNet raw data.list <-> lazy CutSet: layout, round trips, path resolution, writer."""

from __future__ import annotations

import json
import os
import pickle

import numpy as np
import pytest
import soundfile as sf

from wenet_lhotse.errors import SkipReport, WenetDataError
from wenet_lhotse.formats import read_raw_list, read_shard_list, write_raw_list, write_wenet_shards
from wenet_lhotse.io.policy import ReadPolicy
from wenet_lhotse.sources import read_wenet_list


def write_wav(path, seconds=1.0, sr=16000, seed=0, channels=1):
    rng = np.random.default_rng(seed)
    n = int(seconds * sr)
    pcm = rng.integers(-20000, 20000, size=(n, channels) if channels > 1 else n, dtype=np.int16)
    path.parent.mkdir(parents=True, exist_ok=True)
    sf.write(str(path), pcm, sr, subtype="PCM_16")
    return pcm


def write_lines(path, objs, newline="\n"):
    path.write_bytes(
        "".join(json.dumps(o, ensure_ascii=False) + newline for o in objs).encode("utf-8")
    )
    return path


def test_corpus_list_becomes_cuts(corpus):
    lines = [json.loads(x) for x in corpus.data_list.read_text(encoding="utf-8").splitlines()]
    cuts = read_raw_list(corpus.data_list)
    assert cuts.is_lazy
    got = list(cuts)
    assert [c.id for c in got] == corpus.keys
    for cut, line in zip(got, lines):
        info = sf.info(line["wav"])
        assert cut.recording.id == line["key"]
        assert cut.recording.sources[0].source == line["wav"]
        assert cut.sampling_rate == info.samplerate
        assert cut.recording.num_samples == info.frames
        assert cut.duration == pytest.approx(info.frames / info.samplerate)
        (sup,) = cut.supervisions
        assert (sup.text, sup.speaker, sup.language) == (line["txt"], line["speaker"], None)
        assert sup.start == 0.0 and sup.duration == pytest.approx(cut.duration)
        assert cut.custom is None
    # audio loads and equals the file (16-bit PCM / 32768)
    pcm, _ = sf.read(lines[0]["wav"], dtype="int16")
    np.testing.assert_array_equal(got[0].load_audio()[0], pcm / 32768.0)


def test_lazy_iterator_pickles_and_reiterates(corpus):
    cuts = read_raw_list(corpus.data_list)
    clone = pickle.loads(pickle.dumps(cuts))
    assert [c.id for c in clone] == [c.id for c in cuts] == corpus.keys


def test_round_trip_keeps_keys_texts_fields_and_spans(tmp_path):
    wav = tmp_path / "a" / "long.wav"
    write_wav(wav, seconds=3.0)
    other = tmp_path / "b.wav"
    write_wav(other, seconds=1.5, seed=1)
    objs = [
        {"key": "test/resources/dataset/aishell-BAC009S0724W0121", "wav": str(wav),
         "txt": "甚至出现交易几乎停滞的情况", "start": 0.5, "end": 2.25, "speaker": "S1",
         "lang": "zh", "emotion": "happy", "score": 0.75, "tags": ["a", {"b": 1}]},
        {"key": "utt.with.dots", "wav": str(wav), "txt": "second span", "start": 2.25,
         "end": 3.0},
        {"key": "whole", "wav": str(other), "txt": "whole file", "task": "transcribe"},
        {"key": "no-text", "wav": str(other)},
    ]
    src = write_lines(tmp_path / "data.list", objs)
    cuts = list(read_raw_list(src))
    assert cuts[0].start == 0.5 and cuts[0].duration == pytest.approx(1.75)
    assert cuts[0].custom == {"emotion": "happy", "score": 0.75, "tags": ["a", {"b": 1}]}
    assert cuts[0].supervisions[0].language == "zh"
    assert cuts[3].supervisions[0].text is None
    # the span's audio is that slice of the file
    full, _ = sf.read(str(wav), dtype="int16")
    np.testing.assert_array_equal(cuts[1].load_audio()[0], full[36000:48000] / 32768.0)

    out = write_raw_list(cuts, tmp_path / "out" / "data.list")
    back = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]
    assert back == objs
    assert "甚至" in out.read_text(encoding="utf-8")  # ensure_ascii=False
    # and reading the written list gives the same cuts
    again = list(read_raw_list(out))
    assert [c.to_dict() for c in again] == [c.to_dict() for c in cuts]


def test_relative_paths_resolve_against_cwd_or_wav_root(tmp_path, monkeypatch):
    write_wav(tmp_path / "audio" / "x.wav")
    lst = write_lines(tmp_path / "data.list", [{"key": "x", "wav": "audio/x.wav", "txt": "t"}])
    monkeypatch.chdir(tmp_path)
    cuts = read_raw_list("data.list")
    monkeypatch.chdir("/")  # resolved at read_raw_list() time, not at iteration
    (cut,) = list(cuts)
    assert cut.recording.sources[0].source == str(tmp_path / "audio" / "x.wav")
    (cut,) = list(read_raw_list(lst, wav_root=tmp_path / "audio" / ".."))
    assert cut.recording.sources[0].source == str(tmp_path / "audio" / "x.wav")
    with pytest.raises(WenetDataError, match="audio file not found"):
        list(read_raw_list(lst))  # from "/", audio/x.wav does not exist


def test_several_lists_are_concatenated_and_duplicates_across_them_caught(corpus, tmp_path):
    half = len(corpus.keys) // 2
    lines = corpus.data_list.read_text(encoding="utf-8").splitlines(keepends=True)
    a, b = tmp_path / "a.list", tmp_path / "b.list"
    a.write_text("".join(lines[:half]), encoding="utf-8")
    b.write_text("".join(lines[half:]), encoding="utf-8")
    assert [c.id for c in read_raw_list([a, b])] == corpus.keys
    with pytest.raises(WenetDataError, match=r"a\.list:1: duplicate key") as e:
        list(read_raw_list([a, a]))
    assert e.value.kind == "duplicate" and e.value.line == 1
    # turning the check off reads both copies
    assert len(list(read_raw_list([a, a], check_duplicates=False))) == 2 * half


def test_probe_false_trusts_line_metadata_without_touching_files(tmp_path):
    real = tmp_path / "real.wav"
    write_wav(real, seconds=0.5)
    lst = write_lines(tmp_path / "data.list", [
        {"key": "meta", "wav": str(tmp_path / "absent.wav"), "txt": "a",
         "duration": 2.5, "sample_rate": 8000},
        {"key": "probed", "wav": str(real), "txt": "b"},
    ])
    meta, probed = list(read_raw_list(lst, probe=False))
    assert (meta.duration, meta.sampling_rate, meta.recording.num_samples) == (2.5, 8000, 20000)
    assert meta.custom == {"duration": 2.5, "sample_rate": 8000}  # kept for export
    assert probed.duration == 0.5
    with pytest.raises(WenetDataError, match="absent.wav"):
        list(read_raw_list(lst))  # probing (default) checks the file


def test_detects_data_type_from_content(corpus, tmp_path):
    cuts = read_raw_list(corpus.data_list)
    shard_list = write_wenet_shards(cuts, tmp_path / "shards", shard_size=7)
    assert [c.id for c in read_wenet_list(corpus.data_list)] == corpus.keys
    assert isinstance(read_wenet_list(shard_list).data, type(read_shard_list(shard_list).data))
    assert [c.id for c in read_wenet_list(shard_list)] == corpus.keys
    assert [c.id for c in read_wenet_list(shard_list, data_type="shard")] == corpus.keys
    with pytest.raises(ValueError, match="different types"):
        read_wenet_list([corpus.data_list, shard_list])
    with pytest.raises(ValueError, match="data_type"):
        read_wenet_list(corpus.data_list, data_type="kaldi")


def test_in_memory_audio_needs_audio_dir(corpus, tmp_path):
    shard_list = write_wenet_shards(read_raw_list(corpus.data_list), tmp_path / "sh",
                                    shard_size=10)
    mem_cuts = read_shard_list(shard_list).subset(first=3)
    target = tmp_path / "out.list"
    target.write_text("previous content\n", encoding="utf-8")
    with pytest.raises(ValueError, match="audio_dir"):
        write_raw_list(mem_cuts, target)
    # atomic: the old file is untouched and no temp file is left behind
    assert target.read_text(encoding="utf-8") == "previous content\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.list", "sh"]

    out = write_raw_list(mem_cuts, target, audio_dir=tmp_path / "audio")
    back = list(read_raw_list(out))
    assert [c.id for c in back] == corpus.keys[:3]
    for new, old in zip(back, mem_cuts):
        assert new.recording.sources[0].source.startswith(str(tmp_path / "audio"))
        assert new.supervisions[0].text == old.supervisions[0].text
        np.testing.assert_array_equal(new.load_audio(), old.load_audio())


def test_writer_refuses_bytes_custom_fields(corpus, tmp_path):
    cut = next(iter(read_raw_list(corpus.data_list)))
    cut.custom = {"blob": b"\xff\x00"}
    with pytest.raises(ValueError, match="'blob' holds bytes"):
        write_raw_list([cut], tmp_path / "x.list")
    assert not (tmp_path / "x.list").exists()
    assert list(tmp_path.iterdir()) == []


def test_writer_drops_lhotse_bookkeeping_fields(corpus, tmp_path):
    cut = next(iter(read_raw_list(corpus.data_list)))
    cut.custom = {"shard_origin": "cuts.000000.jsonl.gz", "shar_epoch": 0, "mine": 1}
    (line,) = write_raw_list([cut], tmp_path / "x.list").read_text().splitlines()
    obj = json.loads(line)
    assert obj["mine"] == 1 and "shard_origin" not in obj and "shar_epoch" not in obj


def test_fault_tolerant_keeps_every_valid_line(corpus, tmp_path):
    lines = corpus.data_list.read_text(encoding="utf-8").splitlines()
    bad = lines[:5] + ["{not json"] + lines[5:]
    lst = tmp_path / "data.list"
    lst.write_text("\n".join(bad) + "\n", encoding="utf-8")
    report = SkipReport()
    cuts = list(read_raw_list(lst, policy=ReadPolicy(strict=False, skip_report=report)))
    assert [c.id for c in cuts] == corpus.keys
    assert [(i.line, i.kind) for i in report] == [(6, "json")]


def test_multichannel_wav(tmp_path):
    write_wav(tmp_path / "st.wav", seconds=0.5, channels=2)
    lst = write_lines(tmp_path / "d.list", [{"key": "st", "wav": str(tmp_path / "st.wav"),
                                             "txt": "x"}])
    (cut,) = list(read_raw_list(lst))
    assert cut.num_channels == 2 and cut.load_audio().shape == (2, 8000)
    (line,) = write_raw_list([cut], tmp_path / "o.list").read_text().splitlines()
    assert json.loads(line) == {"key": "st", "wav": str(tmp_path / "st.wav"), "txt": "x"}


def test_write_path_is_returned_and_parent_created(corpus, tmp_path):
    out = write_raw_list(read_raw_list(corpus.data_list), tmp_path / "new" / "dir" / "d.list")
    assert out == tmp_path / "new" / "dir" / "d.list"
    assert len(out.read_text(encoding="utf-8").splitlines()) == len(corpus.keys)
    assert os.listdir(out.parent) == ["d.list"]
