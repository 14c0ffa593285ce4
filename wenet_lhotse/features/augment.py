"""WeNet's waveform and feature augmentations, with an explicit RNG and no sox.

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
* :func:`spec_aug`, :func:`spec_sub`, :func:`spec_trim` -- the same draws, in the same
  order, as WeNet's functions (``random.randint`` calls), so with a ``random.Random``
  in the same state they give identical output. Lhotse's ``SpecAugment`` differs
  (batch-level, time warping, mask sizes as fractions, mean fill by default) and is not
  used.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass
from typing import Any, Dict, List, Sequence, Tuple, Union

import numpy as np
import torch

from wenet_lhotse.formats.audio import Samples, as_float_tensor, resample, sinc_resample

__all__ = ["resample", "speed_perturb"]  # resample lives in formats (the shard writer uses it)


@dataclass(frozen=True)
class SpecAugConfig:
    """WeNet ``spec_aug_conf``: masks counted and sized in frames / mel bins."""

    num_t_mask: int = 2
    num_f_mask: int = 2
    max_t: int = 50  # frames
    max_f: int = 10  # feature bins
    max_w: int = 80  # time warp width; WeNet accepts and ignores it

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class SpecSubConfig:
    """WeNet ``spec_sub_conf`` (U2++ spec substitution)."""

    max_t: int = 20  # frames
    num_t_sub: int = 3

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class SpecTrimConfig:
    """WeNet ``spec_trim_conf`` (TrimTail)."""

    max_t: int = 20  # frames

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


def as_config(value: Union[None, bool, Dict[str, Any], Any], cls):
    """``None``/``False`` -> None, ``True`` -> defaults, a dict -> ``cls(**dict)``."""
    if value is None or value is False:
        return None
    if value is True:
        return cls()
    if isinstance(value, dict):
        return cls(**value)
    if isinstance(value, cls):
        return value
    raise TypeError(f"expected None, bool, dict or {cls.__name__}, got {type(value).__name__}")


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


Span = Tuple[int, int]  # [start, end)


def spec_aug_draws(frames: int, bins: int, rng: random.Random,
                   cfg: SpecAugConfig) -> Tuple[List[Span], List[Span]]:
    """The ``(time spans, bin spans)`` that :func:`spec_aug` zeroes in a ``(frames, bins)``
    matrix: WeNet's ``randint`` draws, in WeNet's order. Drawn where the frame count is
    known (e.g. a DataLoader worker) and applied elsewhere (``features/device.py``), the
    masks are those of :func:`spec_aug` with the same ``rng`` state."""
    if frames == 0:  # WeNet would fail in randint(0, -1); nothing to mask
        return [], []
    t_spans, f_spans = [], []
    for _ in range(cfg.num_t_mask):
        start = rng.randint(0, frames - 1)
        length = rng.randint(1, cfg.max_t)
        t_spans.append((start, min(frames, start + length)))
    for _ in range(cfg.num_f_mask):
        start = rng.randint(0, bins - 1)
        length = rng.randint(1, cfg.max_f)
        f_spans.append((start, min(bins, start + length)))
    return t_spans, f_spans


def spec_aug(feats: np.ndarray, rng: random.Random, cfg: SpecAugConfig) -> np.ndarray:
    """Zero ``num_t_mask`` time masks (1..max_t frames) and ``num_f_mask`` frequency masks
    (1..max_f bins) of ``feats`` ``(frames, bins)``; returns a copy."""
    y = feats.copy()
    t_spans, f_spans = spec_aug_draws(y.shape[0], y.shape[1], rng, cfg)
    for a, b in t_spans:
        y[a:b, :] = 0
    for a, b in f_spans:
        y[:, a:b] = 0
    return y


def spec_sub_draws(frames: int, rng: random.Random,
                   cfg: SpecSubConfig) -> List[Tuple[int, int, int]]:
    """``(start, end, pos)`` per substitution of :func:`spec_sub`: frames
    ``[start, end)`` become input frames ``[start - pos, end - pos)``."""
    if frames == 0:
        return []
    out = []
    for _ in range(cfg.num_t_sub):
        start = rng.randint(0, frames - 1)
        length = rng.randint(1, cfg.max_t)
        end = min(frames, start + length)
        pos = rng.randint(0, start)
        out.append((start, end, pos))
    return out


def spec_sub(feats: np.ndarray, rng: random.Random, cfg: SpecSubConfig) -> np.ndarray:
    """Replace ``num_t_sub`` spans (1..max_t frames) by an earlier span of the *input*
    (U2++ section 3.2.3); returns a copy of the same shape."""
    y = feats.copy()
    for start, end, pos in spec_sub_draws(y.shape[0], rng, cfg):
        y[start:end, :] = feats[start - pos : end - pos, :]
    return y


def spec_trim_draw(frames: int, rng: random.Random, cfg: SpecTrimConfig) -> int:
    """The frame count :func:`spec_trim` keeps of ``frames``."""
    length = rng.randint(1, cfg.max_t)
    return frames - length if length < frames / 2 else frames


def spec_trim(feats: np.ndarray, rng: random.Random, cfg: SpecTrimConfig) -> np.ndarray:
    """Drop 1..max_t trailing frames, unless that would remove half the utterance or more
    (TrimTail). Returns ``feats[:frames - n]`` (a view) or ``feats`` unchanged."""
    keep = spec_trim_draw(feats.shape[0], rng, cfg)
    return feats[:keep] if keep != feats.shape[0] else feats
