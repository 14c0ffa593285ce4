"""Lossless audio for Lhotse Shar: the decoded samples equal the source's, bit for bit.

Lhotse's Shar writers decode every recording to float32 and re-encode it. Its
``"flac"`` writer always stores 16-bit PCM, which is exact for 16-bit sources
(libsndfile's float<->int16 conversions are inverse to each other) but rounds
24-bit and float audio. :class:`LosslessAudioTarWriter` picks, per utterance, the
smallest encoding that holds the decoded samples exactly:

* samples on the 16-bit grid (``x * 2**15`` integral)  -> FLAC, PCM_16
* samples on the 24-bit grid (``x * 2**23`` integral)  -> FLAC, PCM_24
* anything else (float WAV, decoded MP3/Opus, ...)      -> WAV, FLOAT (32-bit)

Members are named ``<cut_id>.flac`` or ``<cut_id>.wav``; Lhotse's Shar reader
decodes audio from its content, so either name reads back with ``CutSet.from_shar``.

:class:`CopyingSharWriter` (format ``"copy"``) skips decoding and encoding where it
can: a cut that is a whole WAV or FLAC recording has its original bytes stored
(identical bytes, so identical samples), as are whole OGG/Vorbis, Opus, MP3, M4A and
WMA recordings (Parquet rows: Lhotse's reader decodes them from their content); other
cuts fall back to ``"lossless"``.
About 3-5x faster than FLAC encoding, but WAV stays uncompressed.
"""

from __future__ import annotations

import json
from io import BytesIO
from typing import Optional, Tuple

import numpy as np
from lhotse import Recording, fastcopy
from lhotse.shar import SharWriter
from lhotse.shar.utils import to_shar_placeholder
from lhotse.shar.writers.audio import AudioTarWriter
from lhotse.shar.writers.tar import TarWriter

from wenet_lhotse.formats.layout import whole_recording_bytes

#: Audio formats accepted by :func:`wenet_lhotse.convert.wenet_to_shar`:
#: ``"lossless"`` and ``"copy"`` (ours) and Lhotse's own Shar audio writers.
AUDIO_FORMATS = ("lossless", "copy", "flac", "wav", "original", "opus", "mp3")

# Containers whose bytes "copy" stores as they are (libsndfile decodes them exactly).
def _on_grid(samples: np.ndarray, bits: int) -> bool:
    # Scaling by a power of two is exact in floating point, so this test is exact.
    scale = float(2 ** (bits - 1))
    scaled = samples * np.asarray(scale, dtype=samples.dtype)
    if scaled.size and (scaled.min() < -scale or scaled.max() > scale - 1):
        return False
    return bool(np.array_equal(scaled, np.rint(scaled)))


def choose_lossless_encoding(samples: np.ndarray) -> Tuple[str, str, str]:
    """``(soundfile format, subtype, member extension)`` that stores ``samples``
    (float, shape ``(channels, num_samples)``, range [-1, 1)) without any change."""
    if _on_grid(samples, 16):
        return "FLAC", "PCM_16", "flac"
    if _on_grid(samples, 24):
        return "FLAC", "PCM_24", "flac"
    return "WAV", "FLOAT", "wav"


def encode_lossless(samples: np.ndarray, sampling_rate: int) -> Tuple[bytes, str]:
    """Encode float samples ``(channels, num_samples)`` at ``sampling_rate`` Hz;
    returns ``(encoded bytes, extension)``."""
    import soundfile as sf

    samples = np.asarray(samples)
    if samples.ndim == 1:
        samples = samples[None, :]
    if not np.isfinite(samples).all():  # readers refuse it (training, validate): so do we
        bad = int(samples.size - np.count_nonzero(np.isfinite(samples)))
        raise ValueError(f"audio has {bad} non-finite samples (NaN or Inf)")
    fmt, subtype, ext = choose_lossless_encoding(samples)
    if samples.shape[0] > 8 and fmt == "FLAC":  # FLAC holds at most 8 channels
        fmt, subtype, ext = "WAV", "FLOAT", "wav"
    buf = BytesIO()
    sf.write(buf, samples.T.astype(np.float32, copy=False), sampling_rate, format=fmt,
             subtype=subtype)
    return buf.getvalue(), ext


class LosslessAudioTarWriter(AudioTarWriter):
    """A drop-in for Lhotse's ``AudioTarWriter`` (same tar layout: data member, then
    its ``.json`` manifest) whose encoding is chosen by :func:`choose_lossless_encoding`;
    :meth:`write_encoded` stores bytes that are already encoded."""

    def __init__(self, pattern: str, shard_size: Optional[int] = 1000, shard_offset: int = 0):
        self.format = "lossless"
        self.tar_writer = TarWriter(pattern, shard_size, shard_offset=shard_offset)

    def write(
        self,
        key: str,
        value: np.ndarray,
        sampling_rate: int,
        manifest: Recording,
        original_format: Optional[str] = None,
    ) -> None:
        data, ext = encode_lossless(np.asarray(value), sampling_rate)
        self.write_encoded(key, data, ext, manifest)

    def write_encoded(self, key: str, data: bytes, ext: str, manifest: Recording) -> None:
        """Store already encoded audio ``data`` as member ``key.ext`` plus its manifest."""
        self.tar_writer.write(f"{key}.{ext}", BytesIO(data))
        manifest = to_shar_placeholder(manifest)
        json_stream = BytesIO((json.dumps(manifest.to_dict()) + "\n").encode("utf-8"))
        self.tar_writer.write(f"{key}.json", json_stream, count=False)


class CopyingSharWriter(SharWriter):
    """Lhotse's ``SharWriter`` for ``fields={"recording": ...}`` that stores whole WAV/FLAC
    recordings byte for byte (see :func:`whole_recording_bytes`) instead of decoding and
    re-encoding them; any other cut goes through ``SharWriter.write`` (lossless)."""

    def __init__(self, output_dir: str, shard_suffix: str) -> None:
        super().__init__(output_dir, fields={"recording": "flac"}, shard_size=None,
                         shard_suffix=shard_suffix)
        self.writers["recording"] = LosslessAudioTarWriter(
            f"{output_dir}/recording{shard_suffix}.tar", shard_size=None)

    def write(self, cut) -> None:
        found = whole_recording_bytes(cut, any_format=True)
        if found is None:
            return super().write(cut)
        data, ext = found
        placeholder = to_shar_placeholder(cut.recording, cut)
        self.writers["recording"].write_encoded(cut.id, data, ext, placeholder)
        self.writers["cuts"].write(fastcopy(cut, recording=placeholder, start=0))
