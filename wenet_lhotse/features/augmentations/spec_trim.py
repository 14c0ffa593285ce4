"""WeNet's ``spec_trim`` (TrimTail; ``dataset_conf.spec_trim``, off by default;
settings ``spec_trim_conf``).

Drops 1..``max_t`` trailing frames (one ``randint`` draw, WeNet's), unless that would
remove half the utterance or more. It changes the frame count, and WeNet batches after
it, so batching plans with the frames it keeps (:meth:`SpecTrim.frames`).
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, Sequence

import numpy as np
import torch

from wenet_lhotse.features.augmentations.base import FeatureAugmentation, minimum


@dataclass(frozen=True)
class SpecTrimConfig:
    """WeNet ``spec_trim_conf`` (TrimTail)."""

    max_t: int = field(default=20, metadata=minimum(1))  # frames

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


class SpecTrim(FeatureAugmentation):
    """Tail trimming; the draw is the number of frames kept."""

    name = "spec_trim"
    config = SpecTrimConfig
    changes_frames = True

    def draw(self, frames: int, bins: int, rng: random.Random, cfg: SpecTrimConfig) -> int:
        length = rng.randint(1, cfg.max_t)
        return frames - length if length < frames / 2 else frames

    def apply(self, feats: np.ndarray, draw: int) -> np.ndarray:
        return feats[:draw] if draw != feats.shape[0] else feats

    def apply_batch(self, feats: torch.Tensor, draws: Sequence[Any]) -> torch.Tensor:
        return feats  # the rows are cut to :meth:`frames` by the caller

    def frames(self, frames: int, draw: int) -> int:
        return int(draw)


SPEC_TRIM = SpecTrim()


def spec_trim(feats: np.ndarray, rng: random.Random, cfg: SpecTrimConfig) -> np.ndarray:
    """WeNet's ``spec_trim`` on ``feats`` ``(frames, bins)`` with ``rng``: a view of the
    first frames kept, or ``feats`` unchanged."""
    return SPEC_TRIM.run(feats, rng, cfg)
