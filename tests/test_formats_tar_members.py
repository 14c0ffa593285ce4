"""The fast tar path (formats/tar_members.py) against ``tarfile`` on the same bytes:
same members and data, same exceptions, same end-of-archive verdict, and through
the shard reader the same cuts, skips and one-line errors -- for plain tars, pax and
GNU long names, compression, truncation at every kind of offset, corrupt and oddly
spelled headers, forged sizes, capped members and random corruption."""

from __future__ import annotations

import io
import random
import tarfile
import zlib
from pathlib import Path
from typing import List

import numpy as np
import pytest
import soundfile as sf
from adversarial import add_sparse, add_special, forged_size_tar, tar_of, utt, wav_bytes
from lhotse import AudioSource, Recording, SupervisionSegment
from lhotse.utils import fastcopy

from wenet_lhotse import SkipReport, WenetDataError
from wenet_lhotse.formats.audio import recording_from_bytes
from wenet_lhotse.formats.shard_reader import LazyWenetShardIterator
from wenet_lhotse.formats.tar_members import TarMembers, plain_header
from wenet_lhotse.io.policy import ReadPolicy
from wenet_lhotse.io.streams import TailReader


def members(data: bytes, fast: bool, chunk: int = 0):
    """Everything ``TarMembers`` shows of ``data``: (name, size, type, bytes) per member,
    the exception (type, text) if one ends it, the end verdict, where tarfile took over."""
    raw = _Trickle(data, chunk) if chunk else io.BytesIO(data)
    out: List[tuple] = []
    error = end = None
    tar = TarMembers(TailReader(raw), fast=fast)
    try:
        with tar:
            for info in tar:
                body = tar.read(info) if info.isreg() and info.sparse is None else None
                out.append((info.name, info.size, info.type, body))
            end = tar.end_problem()
    except (tarfile.TarError, EOFError, zlib.error) as e:
        error = (type(e), str(e))
    return out, error, end, tar.handed_over


class _Trickle(io.RawIOBase):
    """A stream that returns at most ``chunk`` bytes per read (a slow socket)."""

    def __init__(self, data: bytes, chunk: int) -> None:
        self._buf, self._chunk = io.BytesIO(data), chunk

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        return self._buf.read(self._chunk if n < 0 else min(n, self._chunk))


def same_members(data: bytes, chunk: int = 0):
    fast, slow = members(data, True, chunk), members(data, False, chunk)
    assert fast[:3] == slow[:3]
    return fast


def read_cuts(path: Path, fast: bool, strict: bool, **policy):
    """``policy``: more :class:`ReadPolicy` fields (``allow_pipe``, ``max_member_bytes``)."""
    report = SkipReport(log=False)
    it = LazyWenetShardIterator(
        [str(path)], policy=ReadPolicy(strict=strict, skip_report=report, **policy))
    it.fast_tar = fast
    cuts, error = [], None
    try:
        for cut in it:
            cuts.append(cut)
    except WenetDataError as e:
        error = (str(e), e.kind, e.source, e.member)
    return cuts, report.items, error


def same_cuts(tmp_path: Path, data: bytes, name: str = "s.tar", **kw):
    path = tmp_path / name
    path.write_bytes(data)
    results = []
    for strict in (True, False):
        fast, slow = read_cuts(path, True, strict, **kw), read_cuts(path, False, strict, **kw)
        assert fast == slow
        results.append(fast)
    return results  # [(cuts, skips, error) strict, (...) fault-tolerant]


def headers(data: bytes) -> List[int]:
    """Offsets of the member headers (pax/GNU extension headers included)."""
    out, pos = [], 0
    while pos + 512 <= len(data) and data[pos:pos + 512] != bytes(512):
        out.append(pos)
        size = int(data[pos + 124:pos + 136].split(b"\0")[0].strip() or b"0", 8)
        pos += 512 + -(-size // 512) * 512
    return out


def with_checksum(block: bytes, signed: bool = False) -> bytes:
    body = block[:148] + b" " * 8 + block[156:]
    total = sum(np.frombuffer(body, np.int8 if signed else np.uint8).astype(int))
    return block[:148] + b"%06o\0 " % (total % (1 << 18)) + block[156:]


def patched(data: bytes, at: int, field: slice, value: bytes, fix: bool = True) -> bytes:
    block = bytearray(data[at:at + 512])
    block[field] = value
    block = bytes(block)
    return data[:at] + (with_checksum(block) if fix else block) + data[at + 512:]


PLAIN = tar_of(utt("u1") + [("u1.speaker", b"spk"), ("u2.txt", b""), ("u2.wav", wav_bytes(2, 512)),
                            ("u3.txt", b"three"), ("u3.wav", wav_bytes(3, 1000))],
               fmt=tarfile.GNU_FORMAT)


def test_plain_tar_is_read_by_the_fast_path_alone(tmp_path):
    out, error, end, handed_over = same_members(PLAIN)
    assert [m[0] for m in out][:3] == ["u1.txt", "u1.wav", "u1.speaker"]
    assert error is None and end is None and handed_over is None
    assert same_members(PLAIN, chunk=7)[3] is None  # short reads: the same
    (cuts, skips, error), _ = same_cuts(tmp_path, PLAIN)
    assert [c.id for c in cuts] == ["u1", "u2", "u3"] and not skips and error is None


def test_plain_header_reads_as_frombuf_does():
    for at in headers(PLAIN):
        block = PLAIN[at:at + 512]
        info = tarfile.TarInfo.frombuf(block, tarfile.ENCODING, "surrogateescape")
        assert plain_header(block) == (info.name, info.size, info.type)
    assert plain_header(bytes(512)) is None
    assert plain_header(PLAIN[:511]) is None


LONG = "d" * 120 + "/" + "k" * 110


@pytest.mark.parametrize("fmt", [tarfile.PAX_FORMAT, tarfile.GNU_FORMAT])
@pytest.mark.parametrize("where", ["first", "middle"])
def test_long_names_hand_over_to_tarfile(tmp_path, fmt, where):
    long_utt = utt(LONG, 5)
    body = long_utt + utt("u2", 2) if where == "first" else utt("u1") + long_utt + utt("u2", 2)
    data = tar_of(body, fmt=fmt)
    out, error, end, handed_over = same_members(data)
    assert [m[0] for m in out if m[0].startswith("d")] == [LONG + ".txt", LONG + ".wav"]
    assert error is None and end is None
    assert handed_over == (0 if where == "first" else headers(data)[2])
    (cuts, _, _), _ = same_cuts(tmp_path, data)
    assert LONG in [c.id for c in cuts]


def test_ustar_prefix_and_v7_names_stay_on_the_fast_path(tmp_path):
    name = "p" * 120 + "/x"  # USTAR splits it into prefix + name
    data = tar_of(utt(name) + utt("u2", 2), fmt=tarfile.USTAR_FORMAT)
    assert data[345] != 0
    out, _, _, handed_over = same_members(data)
    assert out[0][0] == name + ".txt" and handed_over is None
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for n, d, kind in [("dir/", b"", tarfile.AREGTYPE), ("d2", b"", tarfile.DIRTYPE),
                           ("u1.txt", b"one", tarfile.AREGTYPE),
                           ("u1.wav", wav_bytes(), tarfile.REGTYPE)]:
            info = tarfile.TarInfo(n)
            info.type, info.size = kind, len(d)
            tar.addfile(info, io.BytesIO(d))
    out, _, _, handed_over = same_members(buf.getvalue())
    assert [m[0] for m in out] == ["dir", "d2", "u1.txt", "u1.wav"] and handed_over is None
    same_cuts(tmp_path, buf.getvalue())


def test_compressed_tar_goes_to_tarfile(tmp_path):
    import gzip

    data = gzip.compress(PLAIN)
    out, error, end, handed_over = same_members(data)
    assert len(out) == 7 and handed_over == 0
    for cut_at in (len(data) // 2, len(data) - 3):
        same_members(data[:cut_at])
        same_cuts(tmp_path, data[:cut_at])


def test_truncation_anywhere(tmp_path):
    cuts = {0, 1, 511, 512, 513, len(PLAIN) - 1}
    for at in headers(PLAIN):
        cuts |= {at - 1, at, at + 1, at + 100, at + 511, at + 512, at + 513, at + 700}
    cuts |= set(range(0, len(PLAIN), 97))
    verdicts = set()
    for cut_at in sorted(c for c in cuts if 0 <= c < len(PLAIN)):
        out, error, end, _ = same_members(PLAIN[:cut_at])
        verdicts.add((error, end and end[1]))
    assert {e for e, _ in verdicts} >= {None, (tarfile.ReadError, "unexpected end of data"),
                                        (tarfile.ReadError, "empty file")}
    assert {k for _, k in verdicts} >= {None, "truncated"}
    for cut_at in [0, 300, headers(PLAIN)[2], headers(PLAIN)[2] + 600, len(PLAIN) - 9000]:
        same_cuts(tmp_path, PLAIN[:cut_at])


def _odd_tars() -> dict:
    second, third = headers(PLAIN)[1:3]
    size = len(wav_bytes())
    block = bytearray(PLAIN[second:second + 512])
    block[0:8] = "u1\u00e9.wav".encode()  # high bytes: the signed checksum differs
    spaced = b" 644 \0\0\0  0\0\0\0\0\0 0 \0\0\0\0\0"  # mode, uid, gid
    return {
        "bad checksum, first": patched(PLAIN, 0, slice(0, 1), b"X", fix=False),
        "bad checksum, later": patched(PLAIN, second, slice(0, 1), b"X", fix=False),
        "bad octal mode": patched(PLAIN, second, slice(100, 108), b"0000694\0"),
        "bad octal size": patched(PLAIN, third, slice(124, 136), b"0000000x123\0"),
        "base-256 size": patched(PLAIN, second, slice(124, 136),
                                 b"\x80" + size.to_bytes(11, "big")),
        "spaced numbers": patched(PLAIN, second, slice(100, 124), spaced),
        "plus sign": patched(PLAIN, second, slice(136, 148), b"+0000000001\0"),
        "negative size": patched(PLAIN, third, slice(124, 136), b"\xff" * 12),
        "forged size": patched(PLAIN, third, slice(124, 136), b"%011o\0" % (1 << 30)),
        "odd type": patched(PLAIN, third, slice(156, 157), b"Z"),
        "directory with data": patched(PLAIN, second, slice(156, 157), b"5"),
        "signed checksum": PLAIN[:second] + with_checksum(bytes(block), signed=True)
        + PLAIN[second + 512:],
        "garbage after the end": PLAIN[:-4096] + b"junk" * 1024,
        "zeros only": bytes(10240),
        "short": PLAIN[:100],
        "empty": b"",
    }


ODD_TARS = _odd_tars()


@pytest.mark.parametrize("case", sorted(ODD_TARS))
def test_corrupt_and_oddly_spelled_headers(tmp_path, case):
    same_members(ODD_TARS[case])
    same_cuts(tmp_path, ODD_TARS[case])


def test_what_the_fast_path_decides_itself():
    assert members(ODD_TARS["bad checksum, later"], True)[2:] == (
        ("invalid tar header after the last member read (corrupt tar)", "bad_tar"), None)
    for case in ("base-256 size", "spaced numbers", "signed checksum"):  # via frombuf
        assert members(ODD_TARS[case], True)[3] is None, case
    assert members(ODD_TARS["odd type"], True)[3] == headers(PLAIN)[2]
    assert members(ODD_TARS["bad checksum, first"], True)[3] == 0


def test_special_members_forged_sizes_and_the_cap(tmp_path):
    specials = [lambda t: add_special(t, "u2.wav", tarfile.SYMTYPE, "u1.wav"),
                lambda t: add_special(t, "u2.wav", tarfile.LNKTYPE, "u1.wav"),
                lambda t: add_special(t, "u2.wav", tarfile.CHRTYPE),
                lambda t: add_special(t, "u2.wav", tarfile.FIFOTYPE),
                lambda t: add_sparse(t, "u2.wav", 1 << 20)]
    for special in specials:
        data = tar_of(utt("u1") + [("u2.txt", b"two"), special] + utt("u3", 3))
        same_members(data)
        strict, tolerant = same_cuts(tmp_path, data)
        assert strict[2][1] == "bad_member" and [c.id for c in tolerant[0]] == ["u1", "u3"]
    forged = forged_size_tar("big.wav", 1 << 20, prefix=utt("u0") + [("big.txt", b"x")])
    strict, tolerant = same_cuts(tmp_path, forged)
    assert strict[2][1] == "truncated" and [c.id for c in tolerant[0]] == ["u0"]
    size = len(wav_bytes())
    for cap in (size - 1, size):
        strict, tolerant = same_cuts(tmp_path, PLAIN, max_member_bytes=cap)
        assert (strict[2] is not None) == (cap < size)


def test_names_the_reader_refuses(tmp_path):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT,
                      encoding="utf-8", errors="surrogateescape") as tar:
        for name, d in utt("u1") + [("noext", b"x"), ("../up.txt", b"x"), ("\udcff.txt", b"x"),
                                    ("u1.txt", b"again")] + utt("u1", 4) + utt("u5", 5):
            info = tarfile.TarInfo(name)
            info.size = len(d)
            tar.addfile(info, io.BytesIO(d))
    assert members(buf.getvalue(), True)[3] is None
    strict, tolerant = same_cuts(tmp_path, buf.getvalue())
    assert {s.kind for s in tolerant[1]} >= {"invalid", "unsafe_key", "duplicate"}


def test_names_that_look_like_compression_magic(tmp_path):
    """``r|*`` takes a tar whose first bytes look like bz2 for bz2; a handed-over
    header later in the tar (here a CONTTYPE member) must not be."""
    magic = "BZh91AY&SY"
    for first in (True, False):
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
            body = [(magic + ".txt", b"x", tarfile.CONTTYPE), (magic + ".wav", wav_bytes(),
                                                               tarfile.REGTYPE)]
            body = body + [("u1.txt", b"x", tarfile.REGTYPE), ("u1.wav", wav_bytes(),
                                                               tarfile.REGTYPE)]
            for n, d, kind in body if first else body[2:] + body[:2]:
                info = tarfile.TarInfo(n)
                info.type, info.size = kind, len(d)
                tar.addfile(info, io.BytesIO(d))
        out, error, _, handed_over = same_members(buf.getvalue())
        assert handed_over == (0 if first else headers(buf.getvalue())[2])
        assert (error is not None) == first
        same_cuts(tmp_path, buf.getvalue())


def test_random_corruption(tmp_path):
    rng = random.Random(11)
    starts = headers(PLAIN)
    for i in range(300):
        data = bytearray(PLAIN)
        at = rng.choice(starts) + rng.randrange(512) if i % 3 else rng.randrange(len(data))
        data[at] = rng.randrange(256)
        data = bytes(data)
        if i % 2:  # a valid checksum, so that the rest of the header is what is tested
            block = (at // 512) * 512
            data = data[:block] + with_checksum(data[block:block + 512]) + data[block + 512:]
        same_members(data)
        if i % 10 == 0:
            same_cuts(tmp_path, data)


def test_pipe_streams_read_the_same(tmp_path):
    for i, data in enumerate([PLAIN, PLAIN[:headers(PLAIN)[3] + 700],
                              tar_of(utt("u1") + utt(LONG, 2))]):
        path = tmp_path / f"p{i}.tar"
        path.write_bytes(data)
        for strict in (True, False):
            got = [read_cuts(f"pipe:cat {path}", fast, strict, allow_pipe=True)
                   for fast in (True, False)]
            assert got[0] == got[1]


# ------------------------------------------------------------------------- WAV headers


def _wav(subtype="PCM_16", channels=1, n=1000, rate=16000, fmt="WAV") -> bytes:
    buf = io.BytesIO()
    sf.write(buf, np.zeros((n, channels)), rate, format=fmt, subtype=subtype)
    return buf.getvalue()


def _via_libsndfile(data: bytes, rid: str = "r") -> Recording:
    """How ``recording_from_bytes`` built every recording before it walked WAV headers."""
    with sf.SoundFile(io.BytesIO(data)) as f:
        rate, channels, frames = f.samplerate, f.channels, f.frames
    return Recording(id=rid, sampling_rate=rate, num_samples=frames, duration=frames / rate,
                     sources=[AudioSource(type="memory", channels=list(range(channels)),
                                          source=data)])


def test_recording_from_bytes_is_what_libsndfile_reads():
    files = [_wav(s, c, n, r) for s in ("PCM_16", "PCM_24", "PCM_U8", "FLOAT")
             for c in (1, 2, 9) for n, r in ((1, 8000), (16001, 16000), (1000, 44100))]
    base = _wav()
    files += [
        base[:4] + (len(base) + 8).to_bytes(4, "little") + base[8:] + b"LIST\0\0\0\0",
        base[:40] + (4000).to_bytes(4, "little") + base[44:],  # data size past the end
        base[:4] + (len(base) - 7).to_bytes(4, "little") + base[8:40]  # odd data size
        + (len(base) - 45).to_bytes(4, "little") + base[44:-1],
        base[:32] + (4).to_bytes(2, "little") + base[34:],  # wrong block align
        _wav(fmt="FLAC"),
    ]
    for data in files:
        assert recording_from_bytes(data, "r") == _via_libsndfile(data)


def test_cuts_equal_the_lhotse_construction(tmp_path):
    """The reader's cuts equal ``Recording.from_bytes(...).to_cut()`` with the
    supervision and custom fields set by ``fastcopy`` (how they were built before)."""
    body = utt("u1") + [("u1.speaker", b" spk "), ("u1.lang", b"zh"), ("u1.emo", b"happy\n"),
                        ("u2.txt", b" two "), ("u2.wav", _wav("PCM_16", 2)),
                        ("u3.txt", b"x"), ("u3.wav", _wav("FLOAT")), ("u3.raw", b"\xff")]
    (cuts, _, error), _ = same_cuts(tmp_path, tar_of(body))
    assert error is None and len(cuts) == 3
    members_of = {}
    for name, data in body:
        key, _, suffix = name.rpartition(".")
        members_of.setdefault(key, {})[suffix] = data
    for cut in cuts:
        m = members_of[cut.id]
        audio = m.get("wav")
        rec = Recording.from_bytes(audio, recording_id=cut.id)
        assert recording_from_bytes(audio, cut.id) == rec
        ref = rec.to_cut()
        sup = SupervisionSegment(
            id=cut.id, recording_id=cut.id, start=0.0, duration=ref.duration,
            channel=ref.channel, text=m["txt"].decode().strip(),
            speaker=m["speaker"].decode().strip() if "speaker" in m else None,
            language=m["lang"].decode().strip() if "lang" in m else None,
            # WeNet strips the text; the text as stored is kept beside it when it differs
            # (Parquet round trips keep texts byte-equal)
            custom={"txt_verbatim": m["txt"].decode()}
            if m["txt"].decode() != m["txt"].decode().strip() else None)
        custom = {}
        for k, v in m.items():
            if k not in ("wav", "txt", "speaker", "lang"):
                try:
                    custom[k] = v.decode()
                except UnicodeDecodeError:
                    custom[k] = v
        expected = fastcopy(ref, supervisions=[sup], custom=custom or None)
        assert cut == expected and cut.to_dict() == expected.to_dict()
