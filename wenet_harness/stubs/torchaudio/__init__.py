"""Stand-in for ``torchaudio`` (its wheels need another torch build than 2.13 CPU).

What is stood in, and why, is listed in ``wenet_harness/README.md``. In short:

* ``load`` / ``info`` / ``save``: audio I/O served by soundfile, with torchaudio's
  contract (``load`` gives float32 in [-1, 1], shape ``(channels, samples)``,
  ``frame_offset``/``num_frames`` in samples; ``info(...).sample_rate``).
* ``compliance.kaldi`` (WeNet's fbank/mfcc), ``functional.create_dct``,
  ``functional.resample`` and ``transforms.Resample``: torchaudio's own code, copied
  unchanged from the 2.11.0 wheel (see ``tools/extract_torchaudio.py``).
* ``sox_effects.apply_effects_tensor``: only WeNet's speed-perturb chain, see there.
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass
from typing import BinaryIO, Tuple, Union

import soundfile
import torch

from . import compliance, functional, sox_effects, transforms  # noqa: F401

__version__ = "2.11.0+soundfile-standin"

Source = Union[str, os.PathLike, BinaryIO]


def _rewind(uri: Source) -> None:
    if isinstance(uri, io.IOBase) or hasattr(uri, "seek"):
        uri.seek(0)


@dataclass
class AudioMetaData:
    sample_rate: int
    num_frames: int
    num_channels: int
    bits_per_sample: int
    encoding: str


def info(uri: Source, format=None, buffer_size: int = 4096, backend=None) -> AudioMetaData:
    _rewind(uri)
    i = soundfile.info(uri)
    _rewind(uri)
    bits = {"PCM_16": 16, "PCM_24": 24, "PCM_32": 32, "PCM_U8": 8, "FLOAT": 32,
            "DOUBLE": 64}.get(i.subtype, 0)
    return AudioMetaData(i.samplerate, i.frames, i.channels, bits, i.subtype)


def load(uri: Source, frame_offset: int = 0, num_frames: int = -1, normalize: bool = True,
         channels_first: bool = True, format=None, buffer_size: int = 4096,
         backend=None) -> Tuple[torch.Tensor, int]:
    _rewind(uri)
    data, sr = soundfile.read(uri, start=frame_offset,
                              frames=num_frames if num_frames >= 0 else -1,
                              dtype="float32", always_2d=True)
    wav = torch.from_numpy(data)  # (samples, channels)
    return (wav.t().contiguous() if channels_first else wav), sr


def save(uri: Source, src: torch.Tensor, sample_rate: int, channels_first: bool = True,
         format=None, encoding=None, bits_per_sample=None, buffer_size: int = 4096,
         backend=None, compression=None) -> None:
    data = src.t() if channels_first else src
    soundfile.write(uri, data.detach().cpu().numpy(), sample_rate,
                    subtype="PCM_16" if bits_per_sample in (None, 16) else None,
                    format=format)
