"""Dither noise for the Kaldi kernels: slices of one table of N(0, 1) draws.

Kaldi (and torchaudio, hence WeNet) draws fresh Gaussian noise for every frame sample;
drawing it cost a third of the fbank's own time. Here each waveform gets a slice of
one table of :data:`NOISE_TABLE` draws made once per process from :data:`NOISE_SEED`,
at an offset drawn from the waveform's CPU generator: within a waveform of up to 65 s
(16 kHz) the noise is i.i.d. N(0, 1) as in Kaldi; across waveforms the table's samples
recur at other offsets. Dither (0.1 on the int16 scale in WeNet's recipes) only keeps
silent frames off log(0), for which recurring noise is as good. The table is the same
on every device (a device's copy is made from the CPU table), so the worker path and
``features_on: device`` add the same noise for the same seed.
"""

from __future__ import annotations

import threading
from typing import Dict, Optional, Tuple

import torch

#: Samples of standard-normal noise that dither slices come from (65.5 s at 16 kHz).
NOISE_TABLE = 1 << 20
#: Seed of the noise table: every process draws the same table.
NOISE_SEED = 20_061_984
_NOISE: Dict[str, torch.Tensor] = {}
_SCALED: Dict[Tuple[str, float], torch.Tensor] = {}
# reentrant: a device table is copied from the CPU one, a scaled table from the unscaled one
_NOISE_LOCK = threading.RLock()


def noise_table(device: Optional[torch.device] = None) -> torch.Tensor:
    """The dither noise table on ``device``: :data:`NOISE_TABLE` float32 draws from
    N(0, 1) (a fixed seed, drawn once per process, copied once per device), stored twice
    over so that any slice of up to :data:`NOISE_TABLE` samples is contiguous."""
    dev = "cpu" if device is None else str(torch.device(device))
    table = _NOISE.get(dev)
    if table is None:
        with _NOISE_LOCK:
            table = _NOISE.get(dev)
            if table is None:
                if dev == "cpu":
                    gen = torch.Generator().manual_seed(NOISE_SEED)
                    half = torch.randn(NOISE_TABLE, generator=gen)
                    table = torch.cat((half, half))
                else:
                    table = noise_table().to(dev)
                _NOISE[dev] = table
    return table


#: Scaled copies of the noise table (one per dither value and device, 8 MiB each) kept
#: per process; a recipe has one or two dither values. Past this, slices are scaled.
SCALED_TABLES = 4


def _scaled_table(device: Optional[torch.device], scale: float) -> Optional[torch.Tensor]:
    """:func:`noise_table` times ``scale``, kept; None when :data:`SCALED_TABLES` others
    are kept already."""
    key = ("cpu" if device is None else str(torch.device(device)), float(scale))
    table = _SCALED.get(key)
    if table is None:
        with _NOISE_LOCK:
            table = _SCALED.get(key)
            if table is None and len(_SCALED) < SCALED_TABLES:
                table = _SCALED[key] = noise_table(device) * scale
    return table


def dither_noise(n: int, generator: Optional[torch.Generator] = None,
                 device: Optional[torch.device] = None, scale: float = 1.0) -> torch.Tensor:
    """``n`` samples of N(0, ``scale``**2) dither noise: a slice of :func:`noise_table`
    (times ``scale``) at an offset drawn from ``generator`` (a CPU generator; the global
    one when None), so the same seed gives the same noise on every device. Up to
    :data:`NOISE_TABLE` samples the slice is a view (no copy); longer signals join
    slices at independent offsets."""
    table = noise_table(device) if scale == 1.0 else _scaled_table(device, scale)
    if table is None:
        return dither_noise(n, generator, device) * scale
    offsets = torch.randint(0, NOISE_TABLE, (max(1, -(-n // NOISE_TABLE)),),
                            generator=generator).tolist()
    if n <= NOISE_TABLE:
        return table[offsets[0]: offsets[0] + n]
    pieces = [table[o: o + NOISE_TABLE] for o in offsets]
    return torch.cat(pieces)[:n]


def dithered(wave: torch.Tensor, dither: float, generator: Optional[torch.Generator],
             scale: float = 1.0) -> torch.Tensor:
    """``wave * scale + dither * noise`` in one pass, the noise from :func:`dither_noise`
    (``scale``: WeNet's 32768, exact as a power of two; a separate pass cost as much as
    the dither). WeNet (torchaudio) draws fresh Gaussian noise per frame sample, whose
    drawing cost more than the rest of dithering; see
    :func:`wenet_lhotse.features.kaldi.fbank`."""
    if dither == 0.0:
        return wave if scale == 1.0 else wave * scale
    noise = dither_noise(wave.numel(), generator, wave.device, dither).view(wave.shape)
    return torch.add(noise, wave, alpha=scale)
