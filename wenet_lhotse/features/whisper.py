"""Whisper-style log-mel spectrogram, as WeNet's ``compute_log_mel_spectrogram`` computes it.

WeNet (``wenet/dataset/processor.py``) does, per utterance, on the waveform in [-1, 1]::

    waveform = F.pad(waveform, (0, padding))            # when padding > 0
    if pad_or_trim:                                     # Whisper's fixed 30 s input
        length = max_duration * sample_rate
        waveform = waveform[:length] if len >= length else F.pad(..., (0, length - len))
    stft = torch.stft(waveform, n_fft, hop_length, window=torch.hann_window(n_fft),
                      return_complex=True)              # center=True, reflect padding
    magnitudes = stft[..., :-1].abs() ** 2              # drop the last frame
    mel = librosa.filters.mel(sr=sr, n_fft=n_fft, n_mels=num_mel_bins) @ magnitudes
    log_spec = clamp(mel, min=1e-10).log10()
    log_spec = maximum(log_spec, log_spec.max() - 8.0)  # max over the whole utterance
    feat = ((log_spec + 4.0) / 4.0).T                   # (frames, num_mel_bins)

The mel filters are librosa's defaults (Slaney mel scale, Slaney area normalisation,
fmin 0, fmax sr/2, float32); :func:`slaney_mel_filters` builds them in numpy so
librosa is not needed.
"""

from __future__ import annotations

import functools
from typing import List, Sequence

import numpy as np
import torch


def _hz_to_mel_slaney(freq: np.ndarray) -> np.ndarray:
    freq = np.asanyarray(freq, dtype=np.float64)
    f_sp = 200.0 / 3
    mels = freq / f_sp
    min_log_hz = 1000.0
    min_log_mel = min_log_hz / f_sp
    logstep = np.log(6.4) / 27.0
    return np.where(
        freq >= min_log_hz,
        min_log_mel + np.log(np.maximum(freq, 1e-30) / min_log_hz) / logstep,
        mels,
    )


def _mel_to_hz_slaney(mels: np.ndarray) -> np.ndarray:
    mels = np.asanyarray(mels, dtype=np.float64)
    f_sp = 200.0 / 3
    freqs = f_sp * mels
    min_log_hz = 1000.0
    min_log_mel = min_log_hz / f_sp
    logstep = np.log(6.4) / 27.0
    return np.where(mels >= min_log_mel, min_log_hz * np.exp(logstep * (mels - min_log_mel)),
                    freqs)


@functools.lru_cache(maxsize=32)
def slaney_mel_filters(sampling_rate: int, n_fft: int, n_mels: int) -> np.ndarray:
    """``librosa.filters.mel(sr=sampling_rate, n_fft=n_fft, n_mels=n_mels)``: float32
    ``(n_mels, 1 + n_fft // 2)``, Slaney scale and norm, 0 Hz to Nyquist. Read-only."""
    fmax = sampling_rate / 2.0
    weights = np.zeros((n_mels, 1 + n_fft // 2), dtype=np.float32)
    fftfreqs = np.fft.rfftfreq(n=n_fft, d=1.0 / sampling_rate)
    min_mel, max_mel = _hz_to_mel_slaney(np.array(0.0)), _hz_to_mel_slaney(np.array(fmax))
    mel_f = _mel_to_hz_slaney(np.linspace(min_mel, max_mel, n_mels + 2))
    fdiff = np.diff(mel_f)
    ramps = np.subtract.outer(mel_f, fftfreqs)
    for i in range(n_mels):
        lower = -ramps[i] / fdiff[i]
        upper = ramps[i + 2] / fdiff[i + 1]
        weights[i] = np.maximum(0, np.minimum(lower, upper))
    enorm = 2.0 / (mel_f[2 : n_mels + 2] - mel_f[:n_mels])
    weights *= enorm[:, np.newaxis]
    weights.setflags(write=False)
    return weights


@functools.lru_cache(maxsize=8)
def _hann(n_fft: int) -> torch.Tensor:
    return torch.hann_window(n_fft)


def log_mel_spectrogram(
    waves: Sequence[torch.Tensor],
    sampling_rate: int,
    n_fft: int = 400,
    hop_length: int = 160,
    num_mel_bins: int = 80,
    padding: int = 0,
    pad_or_trim: bool = False,
    max_duration: float = 30,
) -> List[torch.Tensor]:
    """WeNet's Whisper-style log-mel of each 1-D waveform in [-1, 1] -> ``(frames, num_mel_bins)``.

    ``frames = (num_samples + padding) // hop_length``. ``n_fft`` and ``hop_length`` are in
    samples, ``padding`` in samples (zeros appended before the STFT). With
    ``pad_or_trim`` the (padded) waveform is then cut or zero-padded to
    ``max_duration * sampling_rate`` samples, so ``frames = that // hop_length``.
    """
    filters = torch.from_numpy(np.array(slaney_mel_filters(int(sampling_rate), n_fft,
                                                           num_mel_bins)))
    window = _hann(n_fft)
    out = []
    for wave in waves:
        wave = wave.float().reshape(-1)
        if padding > 0:
            wave = torch.nn.functional.pad(wave, (0, padding))
        if pad_or_trim:
            length = int(max_duration * sampling_rate)
            if wave.size(0) >= length:
                wave = wave[:length]
            else:
                wave = torch.nn.functional.pad(wave, (0, length - wave.size(0)))
        stft = torch.stft(wave, n_fft, hop_length, window=window, return_complex=True)
        magnitudes = stft[..., :-1].abs() ** 2
        mel = filters @ magnitudes
        log_spec = torch.clamp(mel, min=1e-10).log10()
        log_spec = torch.maximum(log_spec, log_spec.max() - 8.0)
        out.append(((log_spec + 4.0) / 4.0).transpose(0, 1).contiguous())
    return out
