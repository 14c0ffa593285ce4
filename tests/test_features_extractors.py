"""WenetFbank / WenetMfcc / WhisperLogMel against torchaudio's and WeNet's outputs.

Reference arrays in tests/data/features_reference.npz were produced by real torchaudio
code (``tests/data/make_features_reference.py``) on another machine; torchaudio's own
``kaldi.py`` (installed, ``WENET_LHOTSE_KALDI_PY``, else the WeNet harness's verbatim
copy) is also run here, on the same input, and that comparison is the strict one:
torch's FFT and matrix products round differently across CPUs (MKL picks its kernels
per CPU), which moves low-energy log-mel values of torchaudio's own output by up to
~3e-3 against the stored arrays (seen on an AVX-512 machine).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from lhotse.features.base import FeatureExtractor, create_default_feature_extractor

from wenet_lhotse.features import (
    WenetFbank,
    WenetFbankConfig,
    WenetMfcc,
    WenetMfccConfig,
    WhisperLogMel,
    WhisperLogMelConfig,
    dither,
    extractor_from_wenet_conf,
    kaldi,
)
from wenet_lhotse.features.kaldi import FrameOptions, num_frames
from wenet_lhotse.features.whisper import slaney_mel_filters

REF = np.load(Path(__file__).parent / "data" / "features_reference.npz")
RATES = (8000, 16000, 44100)
TOL = 1e-3  # max abs difference allowed by the compatibility contract (same machine)
STORED_TOL = 1e-2  # against the stored arrays, computed on another CPU (see above)


@pytest.fixture(scope="module")
def ta_kaldi():
    """torchaudio's ``compliance.kaldi``, run on this machine (the reference
    ``bench/features.py`` uses too)."""
    from wenet_harness import kaldi_reference

    return kaldi_reference()[0]


def wenet_fbank(kaldi, wave: np.ndarray, sr: int) -> np.ndarray:
    """WeNet's ``compute_fbank`` arguments (processor.py), through ``kaldi``."""
    return kaldi.fbank(torch.from_numpy(wave).unsqueeze(0) * 32768, num_mel_bins=80,
                       frame_length=25, frame_shift=10, dither=0.0, energy_floor=0.0,
                       sample_frequency=sr).numpy()


def audio(sr: int) -> np.ndarray:
    """The reference audio as WeNet's loader sees it: int16 / 32768, float32."""
    return REF[f"audio_{sr}"].astype(np.float32) / 32768


@pytest.mark.parametrize("sr", RATES)
def test_fbank_matches_torchaudio_reference(sr, ta_kaldi):
    got = WenetFbank(WenetFbankConfig(num_mel_bins=80)).extract(audio(sr), sr)
    want = REF[f"fbank80_{sr}"]
    assert got.dtype == np.float32
    assert got.shape == want.shape
    assert np.abs(got - want).max() <= STORED_TOL
    assert np.abs(got - wenet_fbank(ta_kaldi, audio(sr), sr)).max() <= TOL


SPEECH = np.load(Path(__file__).parent / "data" / "speech_reference.npz")


@pytest.mark.parametrize("sr", RATES)
def test_fbank_matches_torchaudio_on_synthesized_speech(sr, ta_kaldi):
    """Speech from a speech synthesizer (espeak-ng; see make_features_reference.py), with
    silences, voiced and unvoiced parts: the same frames and values as torchaudio."""
    wave = SPEECH[f"audio_{sr}"].astype(np.float32) / 32768
    got = WenetFbank(WenetFbankConfig(num_mel_bins=80)).extract(wave, sr)
    want = SPEECH[f"fbank80_{sr}"]
    assert got.shape == want.shape
    assert np.abs(got - want).max() <= STORED_TOL
    assert np.abs(got - wenet_fbank(ta_kaldi, wave, sr)).max() <= TOL


@pytest.mark.parametrize("sr", RATES)
def test_mfcc_matches_torchaudio_reference(sr, ta_kaldi):
    cfg = WenetMfccConfig(num_mel_bins=40, num_ceps=40, high_freq=0.0, low_freq=20.0)
    got = WenetMfcc(cfg).extract(audio(sr), sr)
    want = REF[f"mfcc40_{sr}"]
    assert got.shape == want.shape
    assert np.abs(got - want).max() <= STORED_TOL
    live = ta_kaldi.mfcc(torch.from_numpy(audio(sr)).unsqueeze(0) * 32768, num_mel_bins=40,
                         frame_length=25, frame_shift=10, dither=0.0, num_ceps=40,
                         high_freq=0.0, low_freq=20.0, sample_frequency=sr).numpy()
    assert np.abs(got - live).max() <= TOL


@pytest.mark.parametrize("n_mels", [80, 128])
def test_whisper_log_mel_matches_wenet_reference(n_mels):
    assert np.array_equal(slaney_mel_filters(16000, 400, n_mels), REF[f"melfilters{n_mels}_16000"])
    got = WhisperLogMel(WhisperLogMelConfig(num_mel_bins=n_mels)).extract(audio(16000), 16000)
    want = REF[f"logmel{n_mels}_16000"]
    assert got.shape == want.shape == (len(audio(16000)) // 160, n_mels)
    assert np.abs(got - want).max() <= TOL


def test_live_torchaudio_windows_and_options(ta_kaldi):
    kaldi = ta_kaldi
    rng = np.random.default_rng(0)
    for sr in RATES:
        x = audio(sr)[: int(0.7 * sr)] + rng.normal(0, 1e-3, int(0.7 * sr)).astype(np.float32)
        wave = torch.from_numpy(x).unsqueeze(0) * 32768
        for window in ("povey", "hamming", "hanning", "rectangular", "blackman"):
            want = kaldi.fbank(wave, num_mel_bins=80, frame_length=25, frame_shift=10,
                               dither=0.0, energy_floor=0.0, sample_frequency=sr,
                               window_type=window)
            got = WenetFbank(WenetFbankConfig(window_type=window)).extract(torch.from_numpy(x),
                                                                            sr)
            assert got.shape == want.shape and (got - want).abs().max() <= TOL, (sr, window)
        want = kaldi.fbank(wave, num_mel_bins=40, dither=0.0, energy_floor=1.0,
                           sample_frequency=sr, snip_edges=False, use_energy=True)
        got = WenetFbank(WenetFbankConfig(num_mel_bins=40, energy_floor=1.0, snip_edges=False,
                                          use_energy=True)).extract(x, sr)
        assert got.shape == tuple(want.shape) and np.abs(got - want.numpy()).max() <= TOL


@pytest.mark.parametrize("use_power,use_log_fbank,raw_energy",
                         [(False, True, True), (True, False, False), (False, False, False)])
def test_kernel_switches_match_torchaudio(ta_kaldi, use_power, use_log_fbank, raw_energy):
    """The kernel's other branches (magnitude instead of power, linear mel energies, the
    energy of the windowed frame), which WeNet's recipes do not reach, against the same
    switches of torchaudio's fbank."""
    x = torch.from_numpy(audio(16000)[:12000]) * 32768
    want = ta_kaldi.fbank(x.unsqueeze(0), num_mel_bins=40, dither=0.0, energy_floor=0.0,
                          sample_frequency=16000, use_power=use_power,
                          use_log_fbank=use_log_fbank, raw_energy=raw_energy, use_energy=True)
    fb = kaldi.FbankOptions(use_power=use_power, use_log_fbank=use_log_fbank,
                            raw_energy=raw_energy, use_energy=True)
    got = kaldi.fbank([x], FrameOptions(sampling_rate=16000, num_mel_bins=40), fb)[0]
    assert got.shape == want.shape and got.is_contiguous()
    scale = 1.0 if use_log_fbank else float(want[:, 1:].abs().max())  # linear: relative
    assert (got[:, 1:] - want[:, 1:]).abs().max() / scale <= TOL
    assert (got[:, 0] - want[:, 0]).abs().max() <= TOL  # log energy


@pytest.mark.parametrize("sr", RATES)
def test_frame_counts(sr):
    ex = WenetFbank()
    window, shift = int(sr * 0.025), int(sr * 0.010)
    for n in (0, window - 1, window, window + shift - 1, window + shift, sr + 17):
        expected = 0 if n < window else 1 + (n - window) // shift
        feats = ex.extract(np.zeros(n, dtype=np.float32) + 0.01, sr)
        assert feats.shape == (expected, 80), n
        assert num_frames(n, FrameOptions(sampling_rate=sr)) == expected


@pytest.mark.parametrize("extractor", [
    WenetFbank(), WenetMfcc(), WhisperLogMel(), WenetFbank(WenetFbankConfig(snip_edges=False)),
], ids=["fbank", "mfcc", "logmel", "fbank-nosnip"])
def test_batch_equals_per_utterance(extractor):
    x = audio(16000)
    # Lengths around the 512-frame block size, and one shorter than a frame.
    waves = [x[:n] for n in (300, 16000, 8000, len(x))] + [np.tile(x, 5)]
    single = [extractor.extract(w, 16000) for w in waves]
    batch = extractor.extract_batch(waves, 16000)
    assert [b.shape for b in batch] == [s.shape for s in single]
    for b, s in zip(batch, single):
        np.testing.assert_allclose(b, s, rtol=0, atol=1e-4)
    # Padded 2-D input with lengths (samples).
    padded = torch.zeros(3, len(x))
    lens = [8000, len(x), 12345]
    for i, n in enumerate(lens):
        padded[i, :n] = torch.from_numpy(x[:n])
    out = extractor.extract_batch(padded, 16000, lengths=torch.tensor(lens))
    assert [o.shape[0] for o in out] == [extractor.extract(x[:n], 16000).shape[0] for n in lens]


def test_dither_uses_wenet_units_and_generator():
    x = audio(16000)
    clean = WenetFbank().extract(x, 16000)
    ex = WenetFbank(WenetFbankConfig(dither=1.0))  # WeNet: +-1 on the int16 scale
    a = ex.compute([x], 16000, generator=torch.Generator().manual_seed(1))[0].numpy()
    b = ex.compute([x], 16000, generator=torch.Generator().manual_seed(1))[0].numpy()
    c = ex.compute([x], 16000, generator=torch.Generator().manual_seed(2))[0].numpy()
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    # One int16 step of noise barely moves speech-level energies (Lhotse's dither=1.0
    # on the [-1, 1] scale would swamp them).
    assert 0 < np.median(np.abs(a - clean)) < 0.05
    assert np.array_equal(ex.compute([x], 16000, dither=0.0)[0].numpy(), clean)


def test_dither_noise_is_gaussian_per_waveform_and_seeded():
    gen = lambda seed: torch.Generator().manual_seed(seed)  # noqa: E731
    n = 16000 * 20
    a, b, c = (dither.dither_noise(n, gen(s)) for s in (1, 1, 2))
    assert torch.equal(a, b) and not torch.equal(a, c)
    # i.i.d. N(0, 1) within a waveform: moments, and no correlation between neighbours
    assert abs(float(a.mean())) < 0.01 and abs(float(a.std()) - 1) < 0.01
    assert abs(float((a[1:] * a[:-1]).mean())) < 0.01
    assert abs(float((a ** 4).mean()) - 3) < 0.1  # Gaussian kurtosis
    # longer than the table: joined slices, still the asked length and seeded
    long = dither.dither_noise(dither.NOISE_TABLE + 5, gen(3))
    assert long.shape == (dither.NOISE_TABLE + 5,)
    assert torch.equal(long, dither.dither_noise(dither.NOISE_TABLE + 5, gen(3)))
    # dithered() adds dither * noise, the noise picked by the same generator
    wave = torch.linspace(-100, 100, 1000)
    got = dither.dithered(wave, 0.5, gen(4))
    assert torch.allclose(got, wave + 0.5 * dither.dither_noise(1000, gen(4)))
    assert dither.dithered(wave, 0.0, gen(4)) is wave
    # scale: wave * scale + dither * noise in one pass (WeNet's x32768), the same noise
    scaled = dither.dithered(wave, 0.5, gen(4), 32768.0)
    assert torch.equal(scaled, 0.5 * dither.dither_noise(1000, gen(4)) + wave * 32768.0)
    assert torch.equal(dither.dithered(wave, 0.0, gen(4), 32768.0), wave * 32768.0)
    # scaled tables: the table times the dither, a few kept (8 MiB each); past those the
    # slice is scaled, the same noise
    for i in range(dither.SCALED_TABLES + 2):
        got = dither.dither_noise(1000, gen(5), scale=0.5 + i)
        assert torch.equal(got, dither.dither_noise(1000, gen(5)) * (0.5 + i))
    assert len(dither._SCALED) == dither.SCALED_TABLES


def test_noise_table_on_another_device_before_the_cpu_one(monkeypatch):
    """A device's table is copied from the CPU table, which may not exist yet: the first
    call on a GPU built both under one lock (it deadlocked there once). ``meta`` stands
    in for the GPU: any device other than the CPU takes that path."""
    import threading

    monkeypatch.setattr(dither, "_NOISE", {})
    got = []
    t = threading.Thread(target=lambda: got.append(dither.noise_table(torch.device("meta"))),
                         daemon=True)
    t.start()
    t.join(timeout=30)
    assert got, "noise_table(meta) did not return: the lock is taken twice"
    assert got[0].device.type == "meta" and got[0].shape == (2 * dither.NOISE_TABLE,)
    assert torch.equal(dither.noise_table(), dither.noise_table("cpu"))  # built once


def test_extractors_round_trip_through_lhotse_registry(tmp_path):
    for ex in (WenetFbank(WenetFbankConfig(num_mel_bins=40, dither=0.1)),
               WenetMfcc(WenetMfccConfig(num_ceps=20)),
               WhisperLogMel(WhisperLogMelConfig(num_mel_bins=128))):
        again = FeatureExtractor.from_dict(ex.to_dict())
        assert type(again) is type(ex) and again.config == ex.config
        ex.to_yaml(tmp_path / "fe.yaml")
        assert FeatureExtractor.from_yaml(tmp_path / "fe.yaml").config == ex.config
        assert type(create_default_feature_extractor(ex.name)) is type(ex)
    assert WenetFbank().frame_shift == 0.01
    assert WenetFbank(WenetFbankConfig(use_energy=True)).feature_dim(16000) == 81
    assert WhisperLogMel().frame_shift == 0.01


def test_extractor_from_wenet_conf():
    ex = extractor_from_wenet_conf({})
    assert isinstance(ex, WenetFbank) and ex.config.num_mel_bins == 23  # WeNet's default
    ex = extractor_from_wenet_conf({"feats_type": "fbank", "fbank_conf": {
        "num_mel_bins": 80, "frame_shift": 10, "frame_length": 25, "dither": 0.1}})
    assert ex.config.num_mel_bins == 80 and ex.config.dither == 0.1
    ex = extractor_from_wenet_conf({"feats_type": "mfcc", "mfcc_conf": {
        "num_mel_bins": 40, "num_ceps": 40}})
    assert isinstance(ex, WenetMfcc) and ex.feature_dim(16000) == 40
    with pytest.raises(ValueError, match="num_ceps cannot be larger"):
        extractor_from_wenet_conf({"feats_type": "mfcc"})  # WeNet's own defaults: 40 > 23
    ex = extractor_from_wenet_conf({"feats_type": "log_mel_spectrogram",
                                    "log_mel_spectrogram_conf": {"num_mel_bins": 128}})
    assert isinstance(ex, WhisperLogMel) and ex.feature_dim(16000) == 128
    with pytest.raises(ValueError, match="feats_type"):
        extractor_from_wenet_conf({"feats_type": "spectrogram"})
    with pytest.raises(ValueError, match="num_mel_bin"):
        extractor_from_wenet_conf({"fbank_conf": {"num_mel_bin": 80}})
    with pytest.raises(ValueError, match="window_type"):
        WenetFbank(WenetFbankConfig(window_type="kaiser"))


@pytest.mark.parametrize("num_mel_bins", [23, 80, 128])
def test_fbank_equals_wenets_compute_fbank(wenet_root, num_mel_bins):
    """WeNet's own ``compute_fbank`` (the harness runs torchaudio's kaldi.py verbatim) on
    synthesized speech and on noise, at 8/16/44.1 kHz and every window type: equal to
    float32 rounding. The mel filters are applied per group of bins
    (``kaldi.cached_mel_groups``), which only changes the summation order."""
    from wenet_harness import import_wenet

    (processor,) = import_wenet("wenet.dataset.processor")
    rng = np.random.default_rng(5)
    worst = 0.0
    for sr in RATES:
        speech = SPEECH[f"audio_{sr}"].astype(np.float32) / 32768
        noise = (rng.normal(0, 0.05, sr) + 0.01).astype(np.float32)  # with a DC offset
        for wave in (speech, noise):
            for window in ("povey", "hamming", "hanning", "rectangular", "blackman"):
                sample = {"key": "u", "sample_rate": sr, "wav": torch.from_numpy(wave)[None]}
                want = processor.compute_fbank(sample, num_mel_bins=num_mel_bins,
                                               window_type=window)["feat"]
                cfg = WenetFbankConfig(num_mel_bins=num_mel_bins, window_type=window)
                got = WenetFbank(cfg).extract(wave, sr)
                assert got.shape == tuple(want.shape)
                worst = max(worst, float(np.abs(got - want.numpy()).max()))
    assert worst <= 1e-5, worst
