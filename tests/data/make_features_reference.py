"""Regenerate tests/data/features_reference.npz (int16 audio + torchaudio/librosa outputs)
and tests/data/speech_reference.npz (speech from the espeak-ng synthesizer, resampled to
8/16/44.1 kHz, + torchaudio's kaldi fbank with WeNet's arguments).

Needs torchaudio (or WENET_LHOTSE_KALDI_PY pointing at a standalone copy of
torchaudio/compliance/kaldi.py), librosa and espeak-ng. Run from the repository root:

    WENET_LHOTSE_KALDI_PY=/tmp/ta/kaldi.py python tests/data/make_features_reference.py
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from wenet_lhotse.corpus import synthesize
from wenet_lhotse.features.reference import load_torchaudio_kaldi

RATES = (8000, 16000, 44100)
SECONDS = 1.3


def main() -> None:
    kaldi, origin = load_torchaudio_kaldi()
    assert kaldi is not None, origin
    import librosa

    out = {}
    rng = np.random.default_rng(2024)
    for sr in RATES:
        audio = synthesize("abc dkm po", sr, rng)[: int(SECONDS * sr)]
        pcm = np.round(audio * 32767).astype(np.int16)
        wave = torch.from_numpy(pcm.astype(np.float32) / 32768).unsqueeze(0)
        out[f"audio_{sr}"] = pcm
        # WeNet's compute_fbank / compute_mfcc arguments.
        out[f"fbank80_{sr}"] = kaldi.fbank(
            wave * 32768, num_mel_bins=80, frame_length=25, frame_shift=10, dither=0.0,
            energy_floor=0.0, sample_frequency=sr).numpy()
        out[f"mfcc40_{sr}"] = kaldi.mfcc(
            wave * 32768, num_mel_bins=40, frame_length=25, frame_shift=10, dither=0.0,
            num_ceps=40, high_freq=0.0, low_freq=20.0, sample_frequency=sr).numpy()
    # WeNet's compute_log_mel_spectrogram at 16 kHz, 80 and 128 bins, verbatim.
    wave = torch.from_numpy(out["audio_16000"].astype(np.float32) / 32768)
    for n_mels in (80, 128):
        stft = torch.stft(wave, 400, 160, window=torch.hann_window(400), return_complex=True)
        magnitudes = stft[..., :-1].abs() ** 2
        filters = torch.from_numpy(librosa.filters.mel(sr=16000, n_fft=400, n_mels=n_mels))
        log_spec = torch.clamp(filters @ magnitudes, min=1e-10).log10()
        log_spec = torch.maximum(log_spec, log_spec.max() - 8.0)
        out[f"logmel{n_mels}_16000"] = ((log_spec + 4.0) / 4.0).transpose(0, 1).numpy()
        out[f"melfilters{n_mels}_16000"] = librosa.filters.mel(sr=16000, n_fft=400,
                                                               n_mels=n_mels)
    target = Path(__file__).with_name("features_reference.npz")
    np.savez_compressed(target, origin=np.array(origin), **out)
    print(f"wrote {target} ({target.stat().st_size} bytes) from {origin}")
    make_speech_reference(kaldi, origin)


def make_speech_reference(kaldi, origin: str, seconds: float = 1.5) -> None:
    """Synthesized speech (espeak-ng), the closest to real speech we can make here."""
    import subprocess
    import tempfile

    import soundfile as sf

    from wenet_lhotse.formats.audio import resample

    with tempfile.TemporaryDirectory() as d:
        wav = f"{d}/speech.wav"
        subprocess.run(["espeak-ng", "-w", wav, "Speech recognition with WeNet and Lhotse."],
                       check=True)
        speech, src_sr = sf.read(wav, dtype="float32")
    out = {}
    for sr in RATES:
        audio = resample(speech, src_sr, sr)[: int(seconds * sr)]
        pcm = np.round(np.clip(audio, -1, 1) * 32767).astype(np.int16)
        wave = torch.from_numpy(pcm.astype(np.float32) / 32768).unsqueeze(0)
        out[f"audio_{sr}"] = pcm
        out[f"fbank80_{sr}"] = kaldi.fbank(
            wave * 32768, num_mel_bins=80, frame_length=25, frame_shift=10, dither=0.0,
            energy_floor=0.0, sample_frequency=sr).numpy()
    target = Path(__file__).with_name("speech_reference.npz")
    np.savez_compressed(target, origin=np.array(origin), **out)
    print(f"wrote {target} ({target.stat().st_size} bytes) from {origin} and espeak-ng")


if __name__ == "__main__":
    main()
