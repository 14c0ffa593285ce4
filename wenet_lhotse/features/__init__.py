"""WeNet-exact feature extractors, WeNet's augmentations, and the pooled input strategy.

Submodules: :mod:`.fbank` (Lhotse extractors and the ``feats_type`` factory),
:mod:`.kaldi` (pure-torch Kaldi fbank/MFCC kernels), :mod:`.whisper` (Whisper log-mel),
:mod:`.augment` (resampling, speed perturbation), :mod:`.augmentations` (the feature
augmentations spec_aug/sub/trim, one module each, and their registry), :mod:`.pipeline` (the per-cut
recipe and its seeds), :mod:`.pool` (the process pool), :mod:`.strategy`
(:class:`PooledFeatures`), :mod:`.device` (features on the training device:
:class:`DeviceFeatures`), :mod:`.reference` (locating torchaudio for comparisons).
"""

from __future__ import annotations

from wenet_lhotse.features.augmentations import (
    AUGMENTATIONS,
    FeatureAugmentation,
    SpecAugConfig,
    SpecSubConfig,
    SpecTrimConfig,
)
from wenet_lhotse.features.device import DeviceFeatures
from wenet_lhotse.features.fbank import (
    WenetFbank,
    WenetFbankConfig,
    WenetMfcc,
    WenetMfccConfig,
    WhisperLogMel,
    WhisperLogMelConfig,
    extractor_from_wenet_conf,
)
from wenet_lhotse.features.recipe import cut_seed
from wenet_lhotse.features.strategy import PooledBatch, PooledFeatures

__all__ = [
    "AUGMENTATIONS",
    "DeviceFeatures",
    "FeatureAugmentation",
    "PooledBatch",
    "PooledFeatures",
    "SpecAugConfig",
    "SpecSubConfig",
    "SpecTrimConfig",
    "WenetFbank",
    "WenetFbankConfig",
    "WenetMfcc",
    "WenetMfccConfig",
    "WhisperLogMel",
    "WhisperLogMelConfig",
    "cut_seed",
    "extractor_from_wenet_conf",
]
