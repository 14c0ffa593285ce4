"""WeNet's ``spec_sub`` (U2++ spectrogram substitution, section 3.2.3;
``dataset_conf.spec_sub``, off by default; settings ``spec_sub_conf``).

``num_t_sub`` spans of 1..``max_t`` frames are each replaced by an earlier span of the
*input* (the features before any substitution), with WeNet's ``randint`` draws in
WeNet's order (start, length, shift per span). The frame count is unchanged.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Sequence, Tuple

import numpy as np
import torch

from wenet_lhotse.features.augmentations.base import FeatureAugmentation, minimum

Sub = Tuple[int, int, int]  # frames [start, end) become input frames [start-pos, end-pos)


@dataclass(frozen=True)
class SpecSubConfig:
    """WeNet ``spec_sub_conf`` (U2++ spec substitution)."""

    max_t: int = field(default=20, metadata=minimum(0))  # frames
    num_t_sub: int = field(default=3, metadata=minimum(0))

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


class SpecSub(FeatureAugmentation):
    """Substitution of spans by earlier input spans; the draw is a list of
    ``(start, end, pos)``."""

    name = "spec_sub"
    config = SpecSubConfig

    def draw(self, frames: int, bins: int, rng: random.Random,
             cfg: SpecSubConfig) -> List[Sub]:
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

    def apply(self, feats: np.ndarray, draw: List[Sub]) -> np.ndarray:
        y = feats.copy()
        for start, end, pos in draw:
            y[start:end, :] = feats[start - pos : end - pos, :]
        return y

    def apply_batch(self, feats: torch.Tensor, draws: Sequence[Any]) -> torch.Tensor:
        for i, subs in enumerate(draws):
            if subs:
                src = feats[i].clone()  # copies come from the input, as on the CPU
                for start, end, pos in subs:
                    feats[i, start:end] = src[start - pos : end - pos]
        return feats


SPEC_SUB = SpecSub()


def spec_sub(feats: np.ndarray, rng: random.Random, cfg: SpecSubConfig) -> np.ndarray:
    """WeNet's ``spec_sub`` on ``feats`` ``(frames, bins)`` with ``rng``; returns a copy of
    the same shape."""
    return SPEC_SUB.run(feats, rng, cfg)
