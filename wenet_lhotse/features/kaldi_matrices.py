"""Kaldi's constant feature matrices in plain torch, computed exactly as torchaudio's
``compliance.kaldi`` does: the triangular mel filter bank (no VTLN warping), the
orthonormal DCT-II of MFCC and the cepstral lifter. :mod:`.kaldi` caches them per
options and device. Frequencies in Hz.
"""

from __future__ import annotations

import math
from typing import Any

import torch


def _mel(freq: torch.Tensor) -> torch.Tensor:
    return 1127.0 * (1.0 + freq / 700.0).log()


def mel_banks(opts: Any) -> torch.Tensor:
    """Kaldi's triangular mel filters, shape ``(padded_window_size // 2, num_mel_bins)``,
    for ``opts`` (a :class:`~wenet_lhotse.features.kaldi.FrameOptions`).

    Computed in float32 exactly as torchaudio does (no VTLN warping); the Nyquist bin
    gets no weight, so it is left out.
    """
    num_bins = opts.num_mel_bins
    if num_bins <= 3:
        raise ValueError(f"num_mel_bins must be > 3, got {num_bins}")
    padded = opts.padded_window_size
    sr = opts.sampling_rate
    nyquist = 0.5 * sr
    high = opts.high_freq + nyquist if opts.high_freq <= 0.0 else opts.high_freq
    low = opts.low_freq
    if not (0.0 <= low < nyquist and 0.0 < high <= nyquist and low < high):
        raise ValueError(
            f"bad mel range: low_freq {low} Hz and high_freq {high} Hz vs. Nyquist {nyquist} Hz"
        )
    fft_bin_width = sr / padded
    mel_low = 1127.0 * math.log(1.0 + low / 700.0)
    mel_high = 1127.0 * math.log(1.0 + high / 700.0)
    delta = (mel_high - mel_low) / (num_bins + 1)
    b = torch.arange(num_bins).unsqueeze(1)
    left = mel_low + b * delta
    center = mel_low + (b + 1.0) * delta
    right = mel_low + (b + 2.0) * delta
    mel = _mel(fft_bin_width * torch.arange(padded / 2)).unsqueeze(0)
    up = (mel - left) / (center - left)
    down = (right - mel) / (right - center)
    banks = torch.clamp(torch.min(up, down), min=0.0)  # (num_bins, padded // 2)
    return banks.t().contiguous()


def dct_matrix(num_ceps: int, num_mel_bins: int) -> torch.Tensor:
    """Kaldi's DCT-II (orthonormal, C0 weighted ``sqrt(1/N)``), shape ``(N, num_ceps)``."""
    n = torch.arange(float(num_mel_bins))
    k = torch.arange(float(num_mel_bins)).unsqueeze(1)
    dct = torch.cos(math.pi / float(num_mel_bins) * (n + 0.5) * k)
    dct[0] *= 1.0 / math.sqrt(2.0)
    dct *= math.sqrt(2.0 / float(num_mel_bins))
    dct = dct.t()
    dct[:, 0] = math.sqrt(1 / float(num_mel_bins))
    return dct[:, :num_ceps].contiguous()


def lifter_coeffs(num_ceps: int, cepstral_lifter: float) -> torch.Tensor:
    """Cepstral liftering weights, shape ``(num_ceps,)``."""
    i = torch.arange(num_ceps)
    return 1.0 + 0.5 * cepstral_lifter * torch.sin(math.pi * i / cepstral_lifter)
