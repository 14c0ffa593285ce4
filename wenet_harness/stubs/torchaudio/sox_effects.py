"""Stand-in for ``torchaudio.sox_effects`` (torchaudio cannot install here).

Where libsox and its Python binding are installed (``apt-get install libsox-dev``,
``pip install soxbindings``), the effects run through **libsox itself**, as in
torchaudio: float32 samples to sox's 32-bit integers, the effect chain, back to float32
(``soxbindings.build_flow_effects``, the same flow torchaudio's C++ binding builds).

Otherwise it serves only the chain WeNet's ``processor.speed_perturb`` applies,
``[['speed', s], ['rate', sr]]``: sox's ``speed s`` relabels the audio as ``sr * s`` Hz
and ``rate sr`` resamples it back to ``sr``, so the result is a resampling from
``sr * s`` to ``sr`` -- here with torchaudio's own sinc resampler (``functional``),
not sox's filter: samples not bit-equal to sox, but sox's length: ``rate`` emits
``floor(n / s + 0.5)`` samples (sox ``rate.c``: ``samples_in / factor + .5``), where
torchaudio's resampler gives ``ceil(n / s)``, one more when ``n / s`` has a fraction
below one half; the extra sample is dropped. Tests never compare perturbed audio; any
other effect raises.

``BACKEND`` says which of the two runs.
"""

from __future__ import annotations

from fractions import Fraction
from typing import List, Tuple

import numpy as np
import torch

from .functional import resample

try:  # libsox, where installed
    import soxbindings as _libsox
except ImportError:  # pragma: no cover - depends on the machine
    _libsox = None

BACKEND = ("libsox (soxbindings)" if _libsox is not None
           else "stand-in (torchaudio's sinc resampler)")


def apply_effects_tensor(tensor: torch.Tensor, sample_rate: int, effects: List[List[str]],
                         channels_first: bool = True) -> Tuple[torch.Tensor, int]:
    if _libsox is not None:
        return _through_libsox(tensor, sample_rate, effects, channels_first)
    names = [e[0] for e in effects]
    if names != ["speed", "rate"] or int(float(effects[1][1])) != sample_rate:
        raise NotImplementedError(f"sox_effects stand-in serves only speed+rate, got {effects}")
    speed = Fraction(effects[0][1]).limit_denominator(1000)
    # resample(orig=sr*speed, new=sr), expressed in integers for the sinc kernel
    orig, new = sample_rate * speed.numerator, sample_rate * speed.denominator
    out = resample(tensor, orig, new)
    length = int(tensor.shape[-1] / float(effects[0][1]) + 0.5)  # sox's, <= ceil(n / s)
    return out[..., :length], sample_rate


def _through_libsox(tensor: torch.Tensor, sample_rate: int, effects: List[List[str]],
                    channels_first: bool) -> Tuple[torch.Tensor, int]:
    chain = []
    for name, *args in effects:
        effect = _libsox.SoxEffect()
        effect.effect_name = str(name)
        effect.effect_args = [str(a) for a in args]
        chain.append(effect)
    x = tensor if channels_first else tensor.t()  # (channels, samples)
    # float -> sox's 32-bit samples (x 2**31), clipped as sox's SOX_FLOAT_32BIT_TO_SAMPLE
    # clips; float64 so that 1 - 2**-31 stays below 2**31 after the scaling
    x = x.double().clamp(-1.0, 1.0 - 2.0 ** -31)
    data, rate = _libsox.build_flow_effects(
        x.t().contiguous().numpy(), sample_rate, chain, in_channels=x.shape[0],
        in_precision=32)
    out = torch.from_numpy(np.ascontiguousarray(data.T, dtype=np.float32))
    return (out if channels_first else out.t()), int(rate)
