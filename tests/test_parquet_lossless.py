"""Parquet lossless for every codec (issue 31): rows holding WAV, FLAC, OGG/Vorbis, Opus
and MP3 bytes (made here with soundfile), stored the way Hugging Face ``datasets``
stores audio (``{bytes, path}``), texts with edge spaces and non-ASCII, extra columns.
Parquet -> WeNet shards -> Parquet and Parquet -> Shar -> Parquet give back every audio
byte, text and column; each member is named by its bytes' own format. Member names are
safe and unique (issue 30): unsafe or repeated ids are refused in one line, counted in
fault-tolerant mode."""

from __future__ import annotations

import io
import tarfile

import numpy as np
import pytest
import soundfile as sf
from click.testing import CliRunner

from wenet_lhotse.cli import main
from wenet_lhotse.formats import read_shard_list
from wenet_lhotse.formats.codec import audio_format

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

#: (name, soundfile format, subtype, rate, audio.path, suffix expected)
CODECS = [("wav", "WAV", "PCM_16", 16000, "a.wav", "wav"),
          ("flac", "FLAC", "PCM_16", 16000, None, "flac"),
          ("vorbis", "OGG", "VORBIS", 16000, "c.ogg", "ogg"),
          ("opus", "OGG", "OPUS", 48000, "wrong-name.wav", "opus"),
          ("mp3", "MP3", "MPEG_LAYER_III", 16000, "e.mp3", "mp3")]
TEXTS = [" leading space", "trailing space ", "  both  ", "ünïcödé 漢字 ", "\tplain"]


def _available(fmt: str, subtype: str) -> bool:
    return fmt in sf.available_formats() and subtype in sf.available_subtypes(fmt)


def _encode(fmt: str, subtype: str, rate: int) -> bytes:
    t = np.arange(rate // 2) / rate
    buf = io.BytesIO()
    sf.write(buf, (0.2 * np.sin(2 * np.pi * 440 * t)).astype(np.float32), rate, format=fmt,
             subtype=subtype)
    return buf.getvalue()


def run(*args, code=0):
    res = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)
    assert res.exit_code == code, res.output
    return res


@pytest.fixture(scope="module")
def rows():
    made = [c for c in CODECS if _available(c[1], c[2])]
    missing = {c[0] for c in CODECS} - {c[0] for c in made}
    if missing - {"opus", "mp3"}:  # WAV, FLAC, Vorbis: every libsndfile has them
        pytest.fail(f"libsndfile lacks {missing}")
    return [{"id": f"utt{i}-{name}",
             "audio": {"bytes": _encode(fmt, sub, rate), "path": path},
             "text": TEXTS[i % len(TEXTS)], "speaker_id": f"spk{i}", "score": f"{i / 3:.3f}"}
            for i, (name, fmt, sub, rate, path, _) in enumerate(made)]


@pytest.fixture(scope="module")
def src(rows, tmp_path_factory):
    path = tmp_path_factory.mktemp("pq") / "train.parquet"
    audio = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    schema = pa.schema([("id", pa.string()), ("audio", audio), ("text", pa.string()),
                        ("speaker_id", pa.string()), ("score", pa.string())])
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path, row_group_size=2)
    return path


def test_codecs_available_or_skipped_with_reason():
    for name, fmt, sub, *_ in CODECS:
        if not _available(fmt, sub):
            pytest.skip(f"libsndfile {sf.__libsndfile_version__} cannot write {name} "
                        "(MP3 needs >= 1.1; Opus needs its build option)")


@pytest.mark.parametrize("name,fmt,sub,rate,path,want", CODECS)
def test_format_from_the_bytes_not_the_name(name, fmt, sub, rate, path, want):
    if not _available(fmt, sub):
        pytest.skip(f"libsndfile {sf.__libsndfile_version__} cannot write {name}")
    data = _encode(fmt, sub, rate)
    assert audio_format(data, "misleading.flac" if want != "flac" else "x.wav") == want
    assert audio_format(b"\0" * 16) is None and audio_format(b"\0" * 16, "x.ogg") == "ogg"


def _rows(path):
    return pq.read_table(path).to_pylist()


def _same(back, rows):
    assert [r["id"] for r in back] == [r["id"] for r in rows]
    for got, want in zip(back, rows):
        assert got["audio"]["bytes"] == want["audio"]["bytes"], want["id"]
        assert got["text"] == want["text"], want["id"]  # byte-equal: nothing stripped
        assert got["speaker_id"] == want["speaker_id"] and got["score"] == want["score"]
        assert got["audio"]["path"] == (want["audio"]["path"]
                                        or f"{want['id']}.{audio_format(want['audio']['bytes'])}")


def test_parquet_to_shards_to_parquet_keeps_every_byte(rows, src, tmp_path):
    run("parquet-import", src, "-o", tmp_path / "shards", "--shard-size", "2")
    shard_list = tmp_path / "shards" / "shards.list"
    names = []
    for tar in shard_list.read_text().split():
        with tarfile.open(tar) as t:
            names += t.getnames()
    for row in rows:  # each member named by its bytes' format, the text member verbatim
        ext = audio_format(row["audio"]["bytes"])
        assert f"{row['id']}.{ext}" in names and f"{row['id']}.txt" in names
    assert not any(n.endswith(".wav") and "opus" in n for n in names)
    cuts = list(read_shard_list(str(shard_list)))
    assert [c.supervisions[0].text for c in cuts] == [r["text"].strip() for r in rows]  # WeNet
    assert all(c.load_audio().shape[1] == c.num_samples for c in cuts)  # each one decodes
    res = run("validate", shard_list)
    assert f"{len(rows)} utterances OK" in res.output and "0 problems" in res.output
    run("parquet-export", shard_list, tmp_path / "back.parquet")
    _same(_rows(tmp_path / "back.parquet"), rows)


def test_parquet_to_shar_and_back_keeps_every_byte(rows, src, tmp_path):
    res = run("import", src, "--shar", tmp_path / "shar", "--audio-format", "copy",
              "--shard-size", "2")
    assert f"{len(rows)} utterances written" in res.output
    res = run("import", src, "--shar", tmp_path / "shar", "--audio-format", "copy",
              "--shard-size", "2")  # restartable: a rerun finds every shard complete
    assert "0 written" in res.output and "0 utterances written" in res.output
    from lhotse import CutSet

    shar = list(CutSet.from_shar(in_dir=str(tmp_path / "shar")))
    assert [c.id for c in shar] == [r["id"] for r in rows]
    assert all(c.load_audio().shape[1] == c.num_samples for c in shar)
    run("parquet-export", tmp_path / "shar", tmp_path / "back.parquet")
    _same(_rows(tmp_path / "back.parquet"), rows)
    # and Shar -> WeNet shards -> Parquet again
    run("export", tmp_path / "shar", "--shards", tmp_path / "sh", "-o", tmp_path / "sh.list")
    run("parquet-export", tmp_path / "sh.list", tmp_path / "again.parquet")
    again = _rows(tmp_path / "again.parquet")
    assert [r["text"] for r in again] == [r["text"] for r in rows]


def test_typed_columns_survive_shar_and_read_back_as_text_from_shards(rows, tmp_path):
    src = tmp_path / "typed.parquet"
    typed = [{"id": r["id"], "audio": r["audio"], "text": r["text"], "n": i, "w": i / 4}
             for i, r in enumerate(rows[:2])]
    pq.write_table(pa.Table.from_pylist(typed), src)
    run("import", src, "--shar", tmp_path / "shar", "--audio-format", "copy")
    run("parquet-export", tmp_path / "shar", tmp_path / "s.parquet")
    assert [(r["n"], r["w"]) for r in _rows(tmp_path / "s.parquet")] == [(0, 0.0), (1, 0.25)]
    run("parquet-import", src, "-o", tmp_path / "sh")  # tar members are bytes: JSON text
    run("parquet-export", tmp_path / "sh" / "shards.list", tmp_path / "t.parquet")
    assert [(r["n"], r["w"]) for r in _rows(tmp_path / "t.parquet")] == [("0", "0.0"),
                                                                        ("1", "0.25")]


@pytest.mark.parametrize("bad_id,why", [("../../evil.wav", "'..' component"),
                                        ("/abs/x", "absolute path"),
                                        ("line\nbreak", "control character"),
                                        ("a/./b", "'.' path component")])
def test_unsafe_ids_are_refused_in_one_line_and_counted(rows, tmp_path, bad_id, why):
    bad = [dict(r) for r in rows[:3]]
    bad[1]["id"] = bad_id
    src = tmp_path / "bad.parquet"
    pq.write_table(pa.Table.from_pylist(bad), src)
    res = run("parquet-import", src, "-o", tmp_path / "s", code=1)
    line = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(line) == 1 and "row 1: unsafe id" in line[0] and why in line[0], res.output
    assert "Traceback" not in res.output
    res = run("parquet-import", src, "-o", tmp_path / "t", "--fault-tolerant")
    assert "wrote 2 utterances" in res.output and "skipped 1 bad rows" in res.output
    for tar in (tmp_path / "t" / "shards.list").read_text().split():
        with tarfile.open(tar) as t:
            assert all(not n.startswith("/") and ".." not in n.split("/") and "\n" not in n
                       for n in t.getnames())


def test_duplicate_ids_are_refused_and_counted(rows, tmp_path):
    dup = [dict(r) for r in rows[:3]]
    dup[2]["id"] = dup[0]["id"]
    src = tmp_path / "dup.parquet"
    pq.write_table(pa.Table.from_pylist(dup), src)
    res = run("parquet-import", src, "-o", tmp_path / "s", code=1)
    assert f"row 2: duplicate id '{dup[0]['id']}'" in res.output
    res = run("parquet-import", src, "-o", tmp_path / "t", "--fault-tolerant")
    assert "wrote 2 utterances" in res.output and "skipped 1 bad rows" in res.output
    names = []
    for tar in (tmp_path / "t" / "shards.list").read_text().split():
        with tarfile.open(tar) as t:
            names += t.getnames()
    assert len(names) == len(set(names))


def test_unrecognised_audio_bytes_are_a_named_bad_row(rows, tmp_path):
    aiff = io.BytesIO()
    sf.write(aiff, np.zeros(1600, dtype=np.float32), 16000, format="AIFF")
    odd = [dict(rows[0]), {**rows[1], "audio": {"bytes": aiff.getvalue(), "path": None}}]
    src = tmp_path / "odd.parquet"
    pq.write_table(pa.Table.from_pylist(odd), src)
    res = run("parquet-import", src, "-o", tmp_path / "s", code=1)
    assert "audio format not recognised" in res.output and rows[1]["id"] in res.output
    res = run("parquet-import", src, "-o", tmp_path / "t", "--fault-tolerant")
    assert "wrote 1 utterances" in res.output
