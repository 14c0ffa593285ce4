"""Audio bytes and samples the WeNet formats need: 16-bit PCM WAV encoding, telling
WAV/FLAC files apart by their magic bytes, and WeNet's resampler.

:func:`resample` lives here (not in :mod:`wenet_lhotse.features`) because the shard
writer resamples too, and formats sit below features.
"""

from __future__ import annotations

import io
from typing import Optional

import numpy as np


def encode_pcm16_wav(samples: np.ndarray, sampling_rate: int) -> bytes:
    """Encode float samples in [-1, 1], shape (channels, samples) or (samples,), as a
    16-bit PCM WAV file. Quantizes as ``round(x * 32768)`` clipped to int16, the exact
    inverse of how 16-bit audio is loaded (``int / 32768``), so 16-bit input round-trips
    bit-exactly (libsndfile's own float->int conversion scales by 32767)."""
    import soundfile as sf

    x = np.asarray(samples)
    if x.ndim == 2:
        x = x.T  # soundfile wants (samples, channels)
    pcm = np.clip(np.round(x.astype(np.float64) * 32768.0), -32768, 32767).astype(np.int16)
    buf = io.BytesIO()
    sf.write(buf, pcm, int(sampling_rate), format="WAV", subtype="PCM_16")
    return buf.getvalue()


_MAGIC = ((b"RIFF", 8, b"WAVE", "wav"), (b"fLaC", 0, b"", "flac"))


def sniff_container(data: bytes) -> Optional[str]:
    """``"wav"`` or ``"flac"`` when ``data`` starts like such a file, else None."""
    for magic, off, magic2, ext in _MAGIC:
        if data[:4] == magic and data[off:off + len(magic2)] == magic2:
            return ext
    return None


def resample(samples: np.ndarray, orig_sr: int, new_sr: int) -> np.ndarray:
    """Band-limited sinc resampling of a 1-D float32 signal (torchaudio's ``Resample``).

    Output length is ``ceil(num_samples * new_sr / orig_sr)``.
    """
    if int(orig_sr) == int(new_sr):
        return samples
    import torch
    from lhotse.augmentation.torchaudio import get_or_create_resampler

    resampler = get_or_create_resampler(int(orig_sr), int(new_sr))
    x = torch.from_numpy(np.ascontiguousarray(samples, dtype=np.float32))
    return resampler(x.unsqueeze(0))[0].numpy()
