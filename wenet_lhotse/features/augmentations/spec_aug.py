"""WeNet's ``spec_aug``: time and frequency masks (``dataset_conf.spec_aug``, on by
default as in WeNet; settings ``spec_aug_conf``).

``num_t_mask`` time masks of 1..``max_t`` frames and ``num_f_mask`` frequency masks of
1..``max_f`` bins are set to zero; the draws are WeNet's ``random.randint`` calls in
WeNet's order (all time masks, then all frequency masks), so with a ``random.Random`` in
the same state the output is WeNet's. ``max_w`` (time warp) is accepted and ignored, as
WeNet does. Lhotse's ``SpecAugment`` differs (batch level, time warping, mask sizes as
fractions, mean fill by default) and is not used.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Sequence, Tuple

import numpy as np
import torch

from wenet_lhotse.features.augmentations.base import FeatureAugmentation, minimum

Span = Tuple[int, int]  # [start, end)


@dataclass(frozen=True)
class SpecAugConfig:
    """WeNet ``spec_aug_conf``: masks counted and sized in frames / mel bins."""

    num_t_mask: int = field(default=2, metadata=minimum(0))
    num_f_mask: int = field(default=2, metadata=minimum(0))
    max_t: int = field(default=50, metadata=minimum(0))  # frames
    max_f: int = field(default=10, metadata=minimum(0))  # feature bins
    max_w: int = field(default=80, metadata=minimum(0))  # time warp; WeNet ignores it

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


def spec_aug_draws(frames: int, bins: int, rng: random.Random,
                   cfg: SpecAugConfig) -> Tuple[List[Span], List[Span]]:
    """The ``(time spans, bin spans)`` zeroed in a ``(frames, bins)`` matrix: WeNet's
    ``randint`` draws, in WeNet's order."""
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


class SpecAug(FeatureAugmentation):
    """Time and frequency masks; the draw is ``(time spans, bin spans)``."""

    name = "spec_aug"
    config = SpecAugConfig
    wenet_default = True

    def draw(self, frames: int, bins: int, rng: random.Random,
             cfg: SpecAugConfig) -> Tuple[List[Span], List[Span]]:
        return spec_aug_draws(frames, bins, rng, cfg)

    def apply(self, feats: np.ndarray, draw: Tuple[List[Span], List[Span]]) -> np.ndarray:
        y = feats.copy()
        t_spans, f_spans = draw
        for a, b in t_spans:
            y[a:b, :] = 0
        for a, b in f_spans:
            y[:, a:b] = 0
        return y

    def apply_batch(self, feats: torch.Tensor, draws: Sequence[Any]) -> torch.Tensor:
        # one boolean (B, T, F) mask: position inside any time span or any bin span
        t_spans = [d[0] if d else [] for d in draws]
        f_spans = [d[1] if d else [] for d in draws]
        if any(t_spans) or any(f_spans):
            masked = _span_mask(t_spans, feats.shape[1], feats.device)[:, :, None] \
                | _span_mask(f_spans, feats.shape[2], feats.device)[:, None, :]
            feats.masked_fill_(masked, 0.0)
        return feats


def _span_mask(spans: Sequence[Sequence[Span]], size: int,
               device: torch.device) -> torch.Tensor:
    """``(B, size)`` bool: position inside any of row b's ``[start, end)`` spans."""
    k = max((len(s) for s in spans), default=0)
    if k == 0 or size == 0:
        return torch.zeros((len(spans), size), dtype=torch.bool, device=device)
    se = torch.zeros((len(spans), k, 2), dtype=torch.long)
    for i, s in enumerate(spans):
        if s:
            se[i, : len(s)] = torch.tensor(s, dtype=torch.long)
    se = se.to(device)
    pos = torch.arange(size, device=device)[None, None, :]
    return ((pos >= se[:, :, :1]) & (pos < se[:, :, 1:])).any(dim=1)


SPEC_AUG = SpecAug()


def spec_aug(feats: np.ndarray, rng: random.Random, cfg: SpecAugConfig) -> np.ndarray:
    """WeNet's ``spec_aug`` on ``feats`` ``(frames, bins)`` with ``rng``; returns a copy."""
    return SPEC_AUG.run(feats, rng, cfg)
