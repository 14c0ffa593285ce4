"""Every kind of bad input: strict mode names list file + line (or tar + member);
fault-tolerant mode skips, records and logs exactly the bad item and keeps the rest."""

from __future__ import annotations

import io
import json
import logging
import tarfile

import numpy as np
import pytest
import soundfile as sf

from wenet_lhotse.errors import SkipReport, WenetDataError
from wenet_lhotse.formats import read_raw_list, read_shard_list
from wenet_lhotse.io.policy import ReadPolicy


def wav_file(path, seconds=0.5, seed=0):
    pcm = np.random.default_rng(seed).integers(-9000, 9000, int(16000 * seconds), dtype=np.int16)
    sf.write(str(path), pcm, 16000, subtype="PCM_16")
    return str(path)


def line(**obj) -> bytes:
    return json.dumps(obj, ensure_ascii=False).encode("utf-8")


@pytest.fixture
def audio(tmp_path):
    d = tmp_path / "audio"
    d.mkdir()
    (d / "corrupt.wav").write_bytes(b"RIFF\x00\x00garbage" * 20)
    (d / "empty.wav").write_bytes(b"")
    sf.write(str(d / "nosamples.wav"), np.zeros(0, np.int16), 16000, subtype="PCM_16")
    return {"a": wav_file(d / "a.wav"), "b": wav_file(d / "b.wav", seed=1), "dir": d}


RAW_CASES = {
    "malformed_json": (lambda a: b'{"key": "x", "wav": ', "json", "malformed JSON"),
    "not_an_object": (lambda a: b'["x", "y"]', "json", "expected a JSON object"),
    "missing_key": (lambda a: line(wav=a["a"], txt="t"), "missing_field", "missing 'key'"),
    "missing_wav": (lambda a: line(key="x", txt="t"), "missing_field", "missing 'wav'"),
    "missing_audio": (lambda a: line(key="x", wav=str(a["dir"] / "gone.wav"), txt="t"),
                      "missing_audio", "audio file not found"),
    "corrupt_audio": (lambda a: line(key="x", wav=str(a["dir"] / "corrupt.wav"), txt="t"),
                      "bad_audio", "cannot read audio header"),
    "zero_byte_audio": (lambda a: line(key="x", wav=str(a["dir"] / "empty.wav"), txt="t"),
                        "bad_audio", "cannot read audio header"),
    "zero_sample_audio": (lambda a: line(key="x", wav=str(a["dir"] / "nosamples.wav"), txt="t"),
                          "bad_audio", "no samples"),
    "non_utf8_line": (lambda a: b'{"key": "x", "wav": "' + a["a"].encode() + b'", "txt": "\xff"}',
                      "encoding", "not valid UTF-8"),
    "duplicate_key": (lambda a: line(key="first", wav=a["b"], txt="again"), "duplicate",
                      "duplicate key 'first'"),
    "end_past_audio": (lambda a: line(key="x", wav=a["a"], txt="t", start=0.1, end=0.9),
                       "bad_segment", "past the end"),
    "empty_segment": (lambda a: line(key="x", wav=a["a"], txt="t", start=0.3, end=0.3),
                      "bad_segment", "bad segment"),
    "txt_not_string": (lambda a: line(key="x", wav=a["a"], txt=5), "invalid",
                       "'txt' must be a string"),
}


@pytest.mark.parametrize("case", sorted(RAW_CASES))
def test_raw_bad_line(case, audio, tmp_path, caplog):
    make_bad, kind, message = RAW_CASES[case]
    lst = tmp_path / "data.list"
    lst.write_bytes(b"\n".join([line(key="first", wav=audio["a"], txt="one"), make_bad(audio),
                                line(key="last", wav=audio["b"], txt="three")]) + b"\n")
    with pytest.raises(WenetDataError) as e:
        list(read_raw_list(lst))
    assert str(e.value).startswith(f"{lst}:2: ")
    assert message in str(e.value)
    assert (e.value.kind, e.value.line, e.value.source) == (kind, 2, str(lst))

    report = SkipReport()
    with caplog.at_level(logging.WARNING):
        cuts = list(read_raw_list(lst, policy=ReadPolicy(strict=False, skip_report=report)))
    assert [c.id for c in cuts] == ["first", "last"]
    assert [(i.source, i.line, i.kind) for i in report] == [(str(lst), 2, kind)]
    assert f"{lst}:2" in caplog.text  # logged too


def test_raw_first_bad_duplicate_does_not_hide_later_valid_line(audio, tmp_path):
    lst = tmp_path / "d.list"
    lst.write_bytes(line(key="k", wav=str(audio["dir"] / "gone.wav")) + b"\n"
                    + line(key="k", wav=audio["a"], txt="valid") + b"\n")
    report = SkipReport()
    (cut,) = list(read_raw_list(lst, policy=ReadPolicy(strict=False, skip_report=report)))
    assert cut.supervisions[0].text == "valid"
    assert report.counts() == {"missing_audio": 1}


def test_raw_empty_lines_crlf_bom_and_no_final_newline(audio, tmp_path):
    lst = tmp_path / "d.list"
    lst.write_bytes(b"\xef\xbb\xbf" + line(key="a/b.c", wav=audio["a"], txt="x y") + b"\r\n"
                    + b"\r\n   \n\t\r\n" + line(key="z", wav=audio["b"], txt="z"))
    report = SkipReport()
    cuts = list(read_raw_list(lst, policy=ReadPolicy(strict=False, skip_report=report)))
    assert [(c.id, c.supervisions[0].text) for c in cuts] == [("a/b.c", "x y"), ("z", "z")]
    assert len(report) == 0  # empty lines are not "skipped items"


def test_raw_missing_list_file(tmp_path):
    with pytest.raises(WenetDataError, match="no such list file") as e:
        read_raw_list(tmp_path / "nope.list")
    assert e.value.kind == "missing_file"


# ------------------------------------------------------------------------------ shards


def tar_bytes(members):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def wav_bytes(seed=0, n=800):
    buf = io.BytesIO()
    sf.write(buf, np.random.default_rng(seed).integers(-99, 99, n, dtype=np.int16), 16000,
             format="WAV", subtype="PCM_16")
    return buf.getvalue()


def utt(key, seed=0):
    return [(f"{key}.txt", f"text of {key}".encode()), (f"{key}.wav", wav_bytes(seed))]


def offsets(data):
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return {m.name: (m.offset, m.offset_data, m.size) for m in tar.getmembers()}


def shard_list(tmp_path, *tars):
    paths = []
    for i, data in enumerate(tars):
        p = tmp_path / f"shard{i}.tar"
        p.write_bytes(data)
        paths.append(str(p))
    lst = tmp_path / "shards.list"
    lst.write_text("".join(p + "\n" for p in paths))
    return lst, paths


def check_shard_case(lst, tar, member, kind, message, kept, report_len=1):
    with pytest.raises(WenetDataError) as e:
        list(read_shard_list(lst))
    assert (e.value.source, e.value.member, e.value.kind) == (tar, member, kind)
    assert str(e.value).startswith(f"{tar}[{member}]: " if member else f"{tar}: ")
    assert message in str(e.value)
    report = SkipReport()
    cuts = list(read_shard_list(lst, policy=ReadPolicy(strict=False, skip_report=report)))
    assert [c.id for c in cuts] == kept
    assert len(report) == report_len and report.items[-1].kind == kind
    assert (report.items[-1].source, report.items[-1].member) == (tar, member)


def test_truncated_inside_member_data(tmp_path):
    full = tar_bytes(utt("u1") + utt("u2", 1) + utt("u3", 2))
    _, data_at, size = offsets(full)["u2.wav"]
    lst, (tar,) = shard_list(tmp_path, full[: data_at + size // 2])
    check_shard_case(lst, tar, "u2.wav", "truncated", "truncated tar while reading member u2.wav",
                     kept=["u1"])


def test_truncated_at_member_boundary(tmp_path):
    full = tar_bytes(utt("u1") + utt("u2", 1) + utt("u3", 2))
    header_at, _, _ = offsets(full)["u3.txt"]
    lst, (tar,) = shard_list(tmp_path, full[:header_at])
    # u2 is complete: strict raises, fault-tolerant keeps it and reports the tar
    check_shard_case(lst, tar, "u2.wav", "truncated", "no end-of-archive block",
                     kept=["u1", "u2"])


def test_truncated_inside_header(tmp_path):
    full = tar_bytes(utt("u1") + utt("u2", 1))
    header_at, _, _ = offsets(full)["u2.txt"]
    lst, (tar,) = shard_list(tmp_path, full[: header_at + 100])
    check_shard_case(lst, tar, "u1.wav", "truncated", "truncated tar", kept=["u1"])


def test_garbage_after_members(tmp_path):
    full = tar_bytes(utt("u1"))
    end = max(d + s for _, d, s in offsets(full).values())
    end = (end + 511) // 512 * 512
    lst, (tar,) = shard_list(tmp_path, full[:end] + b"\x07" * 1024)
    check_shard_case(lst, tar, "u1.wav", "bad_tar", "invalid tar header", kept=["u1"])


@pytest.mark.parametrize("drop,member", [("u2.txt", "u2.wav"), ("u2.wav", "u2.txt")])
def test_unpaired_member(tmp_path, drop, member):
    members = [m for m in utt("u1") + utt("u2", 1) + utt("u3", 2) if m[0] != drop]
    lst, (tar,) = shard_list(tmp_path, tar_bytes(members))
    what = "no .txt member" if drop.endswith("txt") else "no audio member"
    check_shard_case(lst, tar, member, "unpaired", what, kept=["u1", "u3"])


def test_unpaired_last_member(tmp_path):
    lst, (tar,) = shard_list(tmp_path, tar_bytes(utt("u1") + [("u2.txt", b"alone")]))
    check_shard_case(lst, tar, "u2.txt", "unpaired", "no audio member", kept=["u1"])


def test_non_utf8_txt_member(tmp_path):
    members = utt("u1") + [("u2.txt", b"caf\xe9"), ("u2.wav", wav_bytes())] + utt("u3")
    lst, (tar,) = shard_list(tmp_path, tar_bytes(members))
    check_shard_case(lst, tar, "u2.txt", "encoding", "not valid UTF-8", kept=["u1", "u3"])


@pytest.mark.parametrize("payload,message", [(b"not audio at all" * 10, "cannot read audio"),
                                             (b"", "cannot read audio"),
                                             (None, "no samples")])
def test_bad_audio_member(tmp_path, payload, message):
    if payload is None:
        buf = io.BytesIO()
        sf.write(buf, np.zeros(0, np.int16), 16000, format="WAV", subtype="PCM_16")
        payload = buf.getvalue()
    members = utt("u1") + [("u2.txt", b"x"), ("u2.flac", payload)] + utt("u3")
    lst, (tar,) = shard_list(tmp_path, tar_bytes(members))
    check_shard_case(lst, tar, "u2.flac", "bad_audio", message, kept=["u1", "u3"])


def test_duplicate_key_across_tars(tmp_path):
    lst, (t0, t1) = shard_list(tmp_path, tar_bytes(utt("u1") + utt("u2")),
                               tar_bytes(utt("u2", 5) + utt("u3")))
    check_shard_case(lst, t1, "u2.wav", "duplicate", "duplicate key 'u2'",
                     kept=["u1", "u2", "u3"])
    cuts = list(read_shard_list(lst, check_duplicates=False))
    assert [c.id for c in cuts] == ["u1", "u2", "u2", "u3"]


def test_member_without_suffix(tmp_path):
    lst, (tar,) = shard_list(tmp_path, tar_bytes(utt("u1") + [("README", b"hi")] + utt("u2")))
    check_shard_case(lst, tar, "README", "invalid", "no .suffix", kept=["u1", "u2"])


def test_missing_and_unreadable_tars(tmp_path):
    lst, (good, junk, empty) = shard_list(tmp_path, tar_bytes(utt("u1")), b"\x01" * 700, b"")
    missing = str(tmp_path / "gone.tar")
    lst.write_text(f"{missing}\n{good}\n")
    with pytest.raises(WenetDataError, match=r"gone\.tar: no such file \(listed at .*:1\)") as e:
        list(read_shard_list(lst))
    assert e.value.kind == "missing_file"
    lst.write_text(f"{junk}\n{empty}\n{missing}\n{good}\n")
    with pytest.raises(WenetDataError, match=r"shard1\.tar: unreadable tar") as e:
        list(read_shard_list(lst))
    assert e.value.kind == "bad_tar"
    report = SkipReport()
    policy = ReadPolicy(strict=False, skip_report=report)
    assert [c.id for c in read_shard_list(lst,
                                          policy=policy)] == ["u1"]
    assert [(i.source, i.kind) for i in report] == [
        (junk, "bad_tar"), (empty, "bad_tar"), (missing, "missing_file")]


def test_non_utf8_line_in_shard_list(tmp_path):
    lst, (good,) = shard_list(tmp_path, tar_bytes(utt("u1")))
    lst.write_bytes(b"/x/\xff.tar\n" + good.encode() + b"\n")
    with pytest.raises(WenetDataError, match=r"shards\.list:1: line is not valid UTF-8"):
        read_shard_list(lst)
    report = SkipReport()
    policy = ReadPolicy(strict=False, skip_report=report)
    assert [c.id for c in read_shard_list(lst, policy=policy)] == ["u1"]
    assert [(i.line, i.kind) for i in report] == [(1, "encoding")]


def test_keys_with_slashes_and_dots_in_tars(tmp_path):
    key = "test/resources/dataset/aishell-BAC009S0724W0121.v2"
    lst, _ = shard_list(tmp_path, tar_bytes(utt(key) + utt("x.y.z")))
    assert [c.id for c in read_shard_list(lst)] == [key, "x.y.z"]


def test_valid_tar_with_long_zero_padding_is_not_reported(tmp_path):
    full = tar_bytes(utt("u1"))
    lst, (tar,) = shard_list(tmp_path, full + bytes(200_000))  # e.g. a large blocking factor
    report = SkipReport()
    policy = ReadPolicy(strict=False, skip_report=report)
    assert [c.id for c in read_shard_list(lst, policy=policy)] == ["u1"]
    assert len(report) == 0


def test_garbage_after_a_long_member(tmp_path):
    full = tar_bytes(utt("u1") + [("u2.txt", b"x"), ("u2.wav", wav_bytes(n=100_000))])
    end = max(d + s for _, d, s in offsets(full).values())
    end = (end + 511) // 512 * 512
    lst, (tar,) = shard_list(tmp_path, full[:end] + b"\x07" * 100_000)
    check_shard_case(lst, tar, "u2.wav", "bad_tar", "invalid tar header", kept=["u1", "u2"])


def test_corrupt_header_between_members(tmp_path):
    full = bytearray(tar_bytes(utt("u1") + utt("u2", 1) + utt("u3", 2)))
    header_at, _, _ = offsets(bytes(full))["u2.txt"]
    full[header_at:header_at + 512] = b"\x07" * 512
    lst, (tar,) = shard_list(tmp_path, bytes(full))
    check_shard_case(lst, tar, "u1.wav", "bad_tar", "corrupt tar", kept=["u1"])


def test_two_audio_members_for_one_key(tmp_path):
    members = utt("u1") + [("u2.txt", b"x"), ("u2.wav", wav_bytes()), ("u2.flac", b"f")]
    lst, (tar,) = shard_list(tmp_path, tar_bytes(members + utt("u3")))
    check_shard_case(lst, tar, "u2.wav", "invalid", "several audio members", kept=["u1", "u3"])


def test_same_suffix_twice_for_one_key(tmp_path):
    members = utt("u1") + [("u1.txt", b"second text")] + utt("u2")
    lst, (tar,) = shard_list(tmp_path, tar_bytes(members))
    check_shard_case(lst, tar, "u1.txt", "duplicate", "second member", kept=["u1", "u2"])
    (first, _) = list(read_shard_list(lst, policy=ReadPolicy(strict=False)))
    assert first.supervisions[0].text == "text of u1"  # the first member wins
