"""WeNet tar shards <-> lazy CutSet: make_shard_list layout, exact audio, shuffling, splitting."""

from __future__ import annotations

import gzip
import io
import json
import shutil
import tarfile
from collections import Counter

import numpy as np
import pytest
import soundfile as sf
import torch

from wenet_lhotse.corpus import generate_corpus
from wenet_lhotse.formats import (
    LazyWenetShardIterator,
    read_raw_list,
    read_shard_list,
    write_raw_list,
    write_wenet_shards,
)


@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    """16 short utterances in 8 shards of 2."""
    return generate_corpus(tmp_path_factory.mktemp("sharded"), num_utterances=16,
                           min_duration=0.5, max_duration=1.0, shard_size=2, seed=7)


def ids(cuts):
    return [c.id for c in cuts]


def add_member(tar, name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def pcm16_bytes(n=1600, sr=16000, fmt="WAV", seed=0):
    buf = io.BytesIO()
    pcm = np.random.default_rng(seed).integers(-9000, 9000, n, dtype=np.int16)
    sf.write(buf, pcm, sr, format=fmt, subtype="PCM_16")
    return buf.getvalue(), pcm


def test_layout_matches_make_shard_list(sharded):
    tars = sharded.shards_list.read_text().splitlines()
    assert [t.rsplit("/", 1)[1] for t in tars] == [f"shards_{i:09d}.tar" for i in range(8)]
    with tarfile.open(tars[0]) as tar:
        members = tar.getmembers()
    k0, k1 = sharded.keys[:2]
    assert [m.name for m in members] == [f"{k0}.txt", f"{k0}.wav", f"{k0}.speaker",
                                         f"{k1}.txt", f"{k1}.wav", f"{k1}.speaker"]
    assert all(m.mtime == 0 and m.isfile() for m in members)
    with tarfile.open(tars[0]) as tar:
        wav = tar.extractfile(f"{k0}.wav").read()
        txt = tar.extractfile(f"{k0}.txt").read().decode("utf-8")
    info = sf.info(io.BytesIO(wav))
    assert (info.format, info.subtype, info.samplerate) == ("WAV", "PCM_16", 16000)
    line = json.loads(sharded.data_list.read_text(encoding="utf-8").splitlines()[0])
    assert txt == line["txt"]


def test_extra_members_off_writes_only_txt_and_wav(sharded, tmp_path):
    cuts = read_raw_list(sharded.data_list).subset(first=2)
    lst = write_wenet_shards(cuts, tmp_path, shard_size=5, extra_members=False)
    assert lst == tmp_path / "shards.list"
    with tarfile.open(lst.read_text().strip()) as tar:
        assert [n.rsplit(".", 1)[1] for n in tar.getnames()] == ["txt", "wav"] * 2


def test_raw_to_shards_round_trip_is_sample_exact(sharded):
    raw = {c.id: c for c in read_raw_list(sharded.data_list)}
    shard_cuts = read_shard_list(sharded.shards_list)
    assert shard_cuts.is_lazy
    got = list(shard_cuts)
    assert ids(got) == sharded.keys
    for cut in got:
        src = raw[cut.id]
        assert cut.recording.sources[0].type == "memory"
        assert cut.supervisions[0].text == src.supervisions[0].text
        assert cut.supervisions[0].speaker == src.supervisions[0].speaker
        assert cut.recording.num_samples == src.recording.num_samples
        np.testing.assert_array_equal(cut.load_audio(), src.load_audio())


def test_custom_fields_spans_and_odd_keys_survive_shards(tmp_path):
    src_pcm = np.random.default_rng(3).integers(-8000, 8000, 32000, dtype=np.int16)
    sf.write(str(tmp_path / "a.wav"), src_pcm, 16000, subtype="PCM_16")
    objs = [
        {"key": "test/resources/dataset/aishell-BAC009S0724W0121", "wav": str(tmp_path / "a.wav"),
         "txt": "你好 世界", "start": 0.25, "end": 1.0, "lang": "zh", "emotion": "calm",
         "score": 0.5},
        {"key": "a.b.c", "wav": str(tmp_path / "a.wav"), "txt": "dots"},
    ]
    lst = tmp_path / "d.list"
    lst.write_text("".join(json.dumps(o, ensure_ascii=False) + "\n" for o in objs), "utf-8")
    shard_list = write_wenet_shards(read_raw_list(lst), tmp_path / "sh", shard_size=10)
    first, second = list(read_shard_list(shard_list))
    assert (first.id, second.id) == (objs[0]["key"], "a.b.c")
    assert first.supervisions[0].text == "你好 世界" and first.supervisions[0].language == "zh"
    # non-str custom values are written as JSON text and come back as str
    assert first.custom == {"emotion": "calm", "score": "0.5"}
    np.testing.assert_array_equal(first.load_audio()[0], src_pcm[4000:16000] / 32768.0)
    np.testing.assert_array_equal(second.load_audio()[0], src_pcm / 32768.0)
    # shards -> raw with audio_dir keeps keys with "/" and "." working
    out = write_raw_list([first, second], tmp_path / "back.list", audio_dir=tmp_path / "aud")
    back = list(read_raw_list(out))
    assert ids(back) == [objs[0]["key"], "a.b.c"]
    assert back[0].recording.sources[0].source.endswith("aishell-BAC009S0724W0121.wav")


def test_non_utf8_extra_member_is_kept_as_bytes_and_written_back(tmp_path):
    wav, _ = pcm16_bytes()
    blob = b"\xff\xfe\x00binary"
    with tarfile.open(tmp_path / "x.tar", "w") as tar:
        add_member(tar, "u1.txt", b"text\n")
        add_member(tar, "u1.wav", wav)
        add_member(tar, "u1.emb", blob)
        add_member(tar, "u1.note", b" spaced \n")
    (tmp_path / "x.list").write_text(str(tmp_path / "x.tar") + "\n")
    (cut,) = list(read_shard_list(tmp_path / "x.list"))
    assert cut.supervisions[0].text == "text"
    assert cut.custom == {"emb": blob, "note": " spaced \n"}
    lst = write_wenet_shards([cut], tmp_path / "out", shard_size=10)
    with tarfile.open(lst.read_text().strip()) as tar:
        assert tar.extractfile("u1.emb").read() == blob
        assert tar.extractfile("u1.wav").read() == wav


@pytest.mark.parametrize("fmt", ["FLAC", "OGG"])
def test_any_wenet_audio_suffix(tmp_path, fmt):
    if fmt == "OGG":
        buf = io.BytesIO()
        sf.write(buf, np.zeros(1600, np.float32), 16000, format="OGG", subtype="VORBIS")
        data, pcm = buf.getvalue(), None
    else:
        data, pcm = pcm16_bytes(fmt=fmt)
    with tarfile.open(tmp_path / "x.tar", "w") as tar:
        add_member(tar, "k.txt", b"hi")
        add_member(tar, f"k.{fmt.lower()}", data)
    (tmp_path / "x.list").write_text(str(tmp_path / "x.tar") + "\n")
    (cut,) = list(read_shard_list(tmp_path / "x.list"))
    assert cut.duration == pytest.approx(0.1, abs=0.01)
    if pcm is not None:
        np.testing.assert_array_equal(cut.load_audio()[0], pcm / 32768.0)


def test_compressed_tar_is_streamed(sharded, tmp_path):
    tar0 = sharded.shards_list.read_text().splitlines()[0]
    gz = tmp_path / "s.tar.gz"
    gz.write_bytes(gzip.compress(open(tar0, "rb").read()))
    (tmp_path / "l").write_text(f"{gz}\n")
    assert ids(read_shard_list(tmp_path / "l")) == sharded.keys[:2]


def test_resample_to(tmp_path):
    c = generate_corpus(tmp_path / "c8k", num_utterances=2, sampling_rate=8000,
                        min_duration=0.5, max_duration=0.6, seed=2)
    lst = write_wenet_shards(read_raw_list(c.data_list), tmp_path / "sh", resample_to=16000)
    cuts = list(read_shard_list(lst))
    assert [x.sampling_rate for x in cuts] == [16000, 16000]
    raw = list(read_raw_list(c.data_list))
    assert cuts[0].recording.num_samples == 2 * raw[0].recording.num_samples


def test_parallel_writer_writes_identical_tars(sharded, tmp_path):
    cuts = read_raw_list(sharded.data_list)
    one = write_wenet_shards(cuts, tmp_path / "one", shard_size=3)
    two = write_wenet_shards(cuts, tmp_path / "two", shard_size=3, num_workers=2)
    a, b = one.read_text().splitlines(), two.read_text().splitlines()
    assert len(a) == len(b) == 6
    for x, y in zip(a, b):
        assert open(x, "rb").read() == open(y, "rb").read()
    assert sorted(p.name for p in (tmp_path / "two").iterdir()) == sorted(
        [f"shards_{i:09d}.tar" for i in range(6)] + ["shards.list"])


def test_shuffle_shards_by_seed_and_epoch(sharded):
    plain = ids(read_shard_list(sharded.shards_list))
    e0 = ids(read_shard_list(sharded.shards_list, shuffle_shards=True, seed=3, epoch=0))
    e0b = ids(read_shard_list(sharded.shards_list, shuffle_shards=True, seed=3, epoch=0))
    cuts = read_shard_list(sharded.shards_list, shuffle_shards=True, seed=3)
    cuts.data.set_epoch(1)
    e1 = ids(cuts)
    assert e0 == e0b and sorted(e0) == sorted(e1) == sorted(plain)
    assert e0 != plain and e1 != e0
    # cuts of one tar stay together and in order
    pairs = [tuple(e0[i:i + 2]) for i in range(0, 16, 2)]
    assert sorted(pairs) == sorted(tuple(plain[i:i + 2]) for i in range(0, 16, 2))


def test_split_explicit_world2_workers2_reads_every_shard_once(sharded):
    seen = Counter()
    shards_seen = Counter()
    for rank in range(2):
        for worker in range(2):
            cuts = read_shard_list(sharded.shards_list, shuffle_shards=True, seed=5,
                                   split_for_dataloading=True, rank=rank, world_size=2,
                                   worker_id=worker, num_workers=2)
            shards_seen.update(e.url for e in cuts.data.assigned_shards())
            got = ids(cuts)
            assert len(got) == 4  # 8 shards of 2 cuts over 4 readers
            seen.update(got)
    assert seen == Counter(sharded.keys)
    assert shards_seen == Counter(sharded.shards_list.read_text().splitlines())


class _CutIds(torch.utils.data.IterableDataset):
    def __init__(self, cuts):
        self.cuts = cuts

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        for cut in self.cuts:
            yield cut.id, info.id


def test_split_with_real_dataloader_workers(sharded):
    seen = Counter()
    by_worker = Counter()
    for rank in range(2):
        cuts = read_shard_list(sharded.shards_list, split_for_dataloading=True,
                               rank=rank, world_size=2, shuffle_shards=True, seed=1)
        loader = torch.utils.data.DataLoader(_CutIds(cuts), batch_size=None, num_workers=2)
        for key, worker in loader:
            seen[key] += 1
            by_worker[(rank, worker)] += 1
    assert seen == Counter(sharded.keys)
    assert by_worker == {(r, w): 4 for r in range(2) for w in range(2)}


def test_split_rank_from_environment(sharded, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    got = ids(read_shard_list(sharded.shards_list, split_for_dataloading=True))
    k = sharded.keys
    assert got == [x for i in range(1, 8, 2) for x in k[2 * i:2 * i + 2]]


def test_split_arguments_need_split_flag(sharded):
    with pytest.raises(ValueError, match="split_for_dataloading"):
        read_shard_list(sharded.shards_list, rank=0, world_size=2)
    with pytest.raises(ValueError, match="bad split"):
        list(read_shard_list(sharded.shards_list, split_for_dataloading=True, rank=2,
                             world_size=2))


def test_shard_list_crlf_and_relative_paths(sharded, tmp_path, monkeypatch):
    shard_dir = tmp_path / "copy"
    shutil.copytree(sharded.root / "shards", shard_dir)
    names = sorted(p.name for p in shard_dir.glob("*.tar"))
    (tmp_path / "rel.list").write_bytes(
        b"\r\n".join(f"copy/{n}".encode() for n in names) + b"\r\n\r\n")
    monkeypatch.chdir(tmp_path)
    cuts = read_shard_list("rel.list")
    monkeypatch.chdir("/")
    assert ids(cuts) == sharded.keys


def test_iterator_pickles(sharded):
    import pickle

    it = LazyWenetShardIterator(sharded.shards_list.read_text().split(), shuffle_shards=True,
                                seed=2, epoch=3)
    clone = pickle.loads(pickle.dumps(it))
    assert ids(clone) == ids(it)


def test_stateful_shuffle_reshuffles_each_pass(sharded):
    cuts = read_shard_list(sharded.shards_list, shuffle_shards=True, seed=4,
                           stateful_shuffle=True)
    first, second = ids(cuts), ids(cuts)
    assert first != second and sorted(first) == sorted(second)
    assert first == ids(read_shard_list(sharded.shards_list, shuffle_shards=True, seed=4))
    assert second == ids(read_shard_list(sharded.shards_list, shuffle_shards=True, seed=4,
                                         epoch=1))


def test_shard_cuts_go_to_lhotse_shar_and_back(sharded, tmp_path):
    from lhotse import CutSet

    cuts = read_shard_list(sharded.shards_list).subset(first=5)
    out = tmp_path / "shar"
    out.mkdir()
    cuts.to_shar(out, fields={"recording": "flac"}, shard_size=2)
    back = list(CutSet.from_shar(in_dir=out))
    assert ids(back) == ids(cuts)
    for a, b in zip(back, cuts):
        assert a.supervisions[0].text == b.supervisions[0].text
        np.testing.assert_array_equal(a.load_audio(), b.load_audio())


def test_raw_cuts_save_to_jsonl_and_load_back(sharded, tmp_path):
    from lhotse import CutSet

    cuts = read_raw_list(sharded.data_list)
    path = tmp_path / "cuts.jsonl.gz"
    cuts.to_file(path)
    back = CutSet.from_file(path)
    assert [c.to_dict() for c in back] == [c.to_dict() for c in cuts]
    np.testing.assert_array_equal(next(iter(back)).load_audio(), next(iter(cuts)).load_audio())


def test_writer_copies_whole_files_like_make_shard_list(tmp_path):
    """make_shard_list.py copies whole audio files byte for byte (a .flac stays .flac)
    and re-encodes only segments; so do we."""
    from wenet_lhotse.formats import read_raw_list, write_wenet_shards

    rng = np.random.default_rng(0)
    pcm = (rng.normal(0, 3000, 16000)).astype(np.int16)
    sf.write(tmp_path / "a.wav", pcm, 16000, subtype="PCM_16")
    sf.write(tmp_path / "b.flac", pcm, 16000, subtype="PCM_16")
    lst = tmp_path / "data.list"
    lst.write_text("\n".join(json.dumps(d) for d in [
        {"key": "a", "wav": str(tmp_path / "a.wav"), "txt": "x"},
        {"key": "b", "wav": str(tmp_path / "b.flac"), "txt": "y"},
        {"key": "seg", "wav": str(tmp_path / "b.flac"), "txt": "z", "start": 0.25, "end": 0.5},
    ]) + "\n", encoding="utf-8")
    shard_list = write_wenet_shards(read_raw_list(lst), tmp_path / "shards", shard_size=10)
    with tarfile.open(shard_list.read_text().split()[0]) as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar}
    assert list(members) == ["a.txt", "a.wav", "b.txt", "b.flac", "seg.txt", "seg.wav"]
    assert members["a.wav"] == (tmp_path / "a.wav").read_bytes()
    assert members["b.flac"] == (tmp_path / "b.flac").read_bytes()
    seg, sr = sf.read(io.BytesIO(members["seg.wav"]), dtype="int16")
    assert sr == 16000 and (seg == pcm[4000:8000]).all()
