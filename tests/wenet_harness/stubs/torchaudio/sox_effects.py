"""Stand-in for ``torchaudio.sox_effects`` (libsox is not available here).

Serves only the chain WeNet's ``processor.speed_perturb`` applies,
``[['speed', s], ['rate', sr]]``: sox's ``speed s`` relabels the audio as ``sr * s`` Hz
and ``rate sr`` resamples it back to ``sr``, so the result is a resampling from
``sr * s`` to ``sr`` -- here with torchaudio's own sinc resampler (``functional``),
not sox's filter: samples not bit-equal to sox, but sox's length: ``rate`` emits
``floor(n / s + 0.5)`` samples (sox ``rate.c``: ``samples_in / factor + .5``), where
torchaudio's resampler gives ``ceil(n / s)``, one more when ``n / s`` has a fraction
below one half; the extra sample is dropped. Tests never compare perturbed audio; any
other effect raises.
"""

from __future__ import annotations

from fractions import Fraction
from typing import List, Tuple

import torch

from .functional import resample


def apply_effects_tensor(tensor: torch.Tensor, sample_rate: int, effects: List[List[str]],
                         channels_first: bool = True) -> Tuple[torch.Tensor, int]:
    names = [e[0] for e in effects]
    if names != ["speed", "rate"] or int(float(effects[1][1])) != sample_rate:
        raise NotImplementedError(f"sox_effects stand-in serves only speed+rate, got {effects}")
    speed = Fraction(effects[0][1]).limit_denominator(1000)
    # resample(orig=sr*speed, new=sr), expressed in integers for the sinc kernel
    orig, new = sample_rate * speed.numerator, sample_rate * speed.denominator
    out = resample(tensor, orig, new)
    length = int(tensor.shape[-1] / float(effects[0][1]) + 0.5)  # sox's, <= ceil(n / s)
    return out[..., :length], sample_rate
