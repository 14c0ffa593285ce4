"""formats.wav reads what libsndfile reads for 16-bit PCM WAV, and declines the rest."""

from __future__ import annotations

import io
import struct

import numpy as np
import pytest
import soundfile as sf

from wenet_lhotse.formats.wav import read_pcm16_wav, wav_layout


def _wav(samples: np.ndarray, rate: int = 16000, **kw) -> bytes:
    buf = io.BytesIO()
    sf.write(buf, samples, rate, format=kw.pop("format", "WAV"), **kw)
    return buf.getvalue()


def _pcm(frames: int, channels: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(-32768, 32767, (frames, channels),
                                                dtype=np.int16)


@pytest.mark.parametrize("channels", [1, 2, 3])
@pytest.mark.parametrize("fmt", ["WAV", "WAVEX"])
def test_samples_equal_libsndfile_from_file_and_bytes(tmp_path, channels, fmt):
    data = _wav(_pcm(16001, channels), 8000, subtype="PCM_16", format=fmt)
    path = tmp_path / "a.wav"
    path.write_bytes(data)
    want, rate = sf.read(io.BytesIO(data), dtype="int16", always_2d=True)
    for source in (str(path), path, data, bytearray(data), memoryview(data)):
        pcm, layout = read_pcm16_wav(source)
        assert np.array_equal(pcm, want) and pcm.flags.writeable
        assert (layout.channels, layout.sampling_rate, layout.frames) == (channels, rate, 16001)


def test_chunks_before_data_and_odd_sized_chunks_are_walked():
    pcm = _pcm(1000, 1)
    plain = _wav(pcm, subtype="PCM_16")
    fmt_end = plain.index(b"data")
    extra = b"LIST" + struct.pack("<I", 5) + b"abcde" + b"\0"  # odd size, one pad byte
    data = bytearray(plain[:fmt_end] + extra + plain[fmt_end:])
    struct.pack_into("<I", data, 4, len(data) - 8)
    assert np.array_equal(sf.read(io.BytesIO(bytes(data)), dtype="int16", always_2d=True)[0],
                          pcm)
    assert np.array_equal(read_pcm16_wav(bytes(data))[0], pcm)


@pytest.mark.parametrize("subtype", ["PCM_U8", "PCM_24", "PCM_32", "FLOAT", "ULAW"])
def test_other_sample_formats_are_left_to_libsndfile(subtype):
    x = np.zeros((100, 1), dtype=np.float32)
    assert read_pcm16_wav(_wav(x, subtype=subtype)) is None


def test_other_containers_and_broken_headers_are_left_to_libsndfile(tmp_path):
    pcm = _pcm(1000, 1)
    wav = _wav(pcm, subtype="PCM_16")
    flac = _wav(pcm, format="FLAC", subtype="PCM_16")
    rf64 = b"RF64" + wav[4:]
    cut_short = wav[:-10]  # the data chunk claims more than there is
    odd = bytearray(wav)
    odd[wav.index(b"data") + 4:wav.index(b"data") + 8] = struct.pack("<I", 2 * 1000 - 1)
    no_fmt = wav[:12] + wav[wav.index(b"data"):]
    for data in (flac, rf64, cut_short, bytes(odd), no_fmt, b"", b"RIFF", wav[:40]):
        assert read_pcm16_wav(data) is None
    assert read_pcm16_wav(str(tmp_path / "missing.wav")) is None  # libsndfile reports it
    assert wav_layout(wav[:44], len(wav)).frames == 1000
    assert wav_layout(wav[:44], len(wav) - 1) is None  # file shorter than its data chunk


def test_decoding_a_cut_uses_it_and_equals_libsndfile(tmp_path):
    from lhotse import Recording

    from wenet_lhotse.formats.audio import load_samples

    pcm = _pcm(8000, 2)
    path = tmp_path / "s.wav"
    path.write_bytes(_wav(pcm, subtype="PCM_16"))
    cut = Recording.from_file(path).to_cut()
    for channel in (0, 1):
        got, rate = load_samples(cut, channel)
        assert got.dtype == np.int16 and rate == 16000
        assert np.array_equal(got, pcm[:, channel])


@pytest.mark.parametrize("subtype", ["PCM_16", "PCM_24"])
def test_raw_list_probe_gives_lhotses_manifest(tmp_path, subtype):
    from lhotse import Recording

    from wenet_lhotse.formats.audio import probe_recording as _probe

    path = tmp_path / "p.wav"
    path.write_bytes(_wav(_pcm(12345, 2).astype(np.float32) / 32768, 22050, subtype=subtype))
    assert _probe(str(path), "k") == Recording.from_file(str(path), recording_id="k")
