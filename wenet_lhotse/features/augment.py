"""WeNet's waveform augmentations (resampling, speed perturbation), with an explicit RNG
and no sox. The feature augmentations are one module each in
:mod:`wenet_lhotse.features.augmentations` (its registry ``AUGMENTATIONS``).

Every function takes a ``random.Random`` (or a ``torch.Generator`` for noise) so the
caller decides the seed; the pool seeds one per (seed, epoch, cut id).

Compared with WeNet's ``wenet/dataset/processor.py``:

* :func:`resample` -- WeNet: ``torchaudio.transforms.Resample(orig, new)`` (windowed sinc,
  Hann, 6 zero crossings, rolloff 0.99). We use the kernel of Lhotse's vendored copy of
  that transform (``lhotse.augmentation.resample``), so the output is the same (to 1e-7;
  applied as one matrix product over strided blocks instead of a strided ``conv1d``,
  which measured ~2x faster on 1-D signals: ``bench/speed_perturb.py``). Note: Lhotse's
  ``Resample`` *AudioTransform* (what ``cut.resample()`` uses) falls back to
  ``scipy.signal.resample_poly`` when torchaudio is missing -- a different filter -- which
  is why the pipeline resamples itself instead of calling ``cut.resample()``.
* :func:`speed_perturb` -- WeNet: sox ``speed <f>`` then ``rate <sr>``: pitch and tempo
  change together; sox's ``rate`` emits ``floor(num_samples / f + 0.5)`` samples, and so
  do we. The resampling from ``round(sr * f)`` to ``sr`` Hz is the sinc resampler above
  (Lhotse's ``Speed`` transform has the same semantics but a ceil length) instead of
  sox's steeper linear-phase filter, so the samples differ slightly; the factor is drawn
  uniformly from ``speeds`` like WeNet's ``random.choice``. Needs neither sox,
  torchaudio nor scipy.

Speed perturbation is not a registered feature augmentation: it acts on the waveform
before extraction, its factor is the cut's first draw (planning draws it alone:
:func:`~wenet_lhotse.features.recipe.planned_speed`), and it changes the sample count
that every later step counts from, so the recipe holds it as ``speeds``.
"""

from __future__ import annotations

import random
from typing import Sequence

import torch

from wenet_lhotse.formats.audio import Samples, as_float_tensor, resample, sinc_resample

__all__ = ["resample", "speed_perturb"]  # resample lives in formats (the shard writer uses it)


def speed_perturbed_length(num_samples: int, factor: float) -> int:
    """Samples :func:`speed_perturb` returns for ``num_samples`` samples: sox's
    ``floor(num_samples / factor + 0.5)`` (the batching constraints plan lengths with
    this, too)."""
    if factor == 1.0:
        return int(num_samples)
    return int(int(num_samples) / float(factor) + 0.5)


def speed_perturb(samples: Samples, sampling_rate: int, factor: float) -> Samples:
    """Sox ``speed <factor>`` + ``rate <sampling_rate>``: tempo and pitch change together,
    the sampling rate stays. The output has sox's length ``floor(num_samples / factor +
    0.5)`` (``factor > 1`` shortens). numpy in -> numpy out, tensor in -> tensor out."""
    if factor == 1.0:
        return samples
    x = as_float_tensor(samples)
    y = sinc_resample(x, round(int(sampling_rate) * float(factor)), int(sampling_rate),
                       speed_perturbed_length(x.numel(), factor))
    return y if isinstance(samples, torch.Tensor) else y.numpy()


def choose_speed(rng: random.Random, speeds: Sequence[float]) -> float:
    """WeNet's ``random.choice(speeds)``."""
    return rng.choice(list(speeds))
