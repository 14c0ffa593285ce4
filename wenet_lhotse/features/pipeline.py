"""The per-cut WeNet recipe: decode, resample, speed perturbation, dither, features,
then the feature augmentations in the registry's order
(:data:`~wenet_lhotse.features.augmentations.AUGMENTATIONS`, WeNet's order), with every
random
draw of a cut seeded by :func:`cut_seed` (``blake2b(seed, epoch, cut.id)``), so results
do not depend on which process computes a cut.

With ``features_on="device"`` a worker only decodes and draws (see
:mod:`~wenet_lhotse.features.device`); the rest runs in the training process.
Decoding reads 16-bit PCM as int16 and converts it (:func:`~wenet_lhotse.formats.audio.
load_samples`: the same floats as ``cut.load_audio()``, measured ~4x less CPU).
"""

from __future__ import annotations

import random
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Tuple

import numpy as np
import torch

from wenet_lhotse.errors import WenetDataError, reraise_worker_death
from wenet_lhotse.features.augment import choose_speed, speed_perturb
from wenet_lhotse.features.recipe import (
    FeatureRecipe,
)
from wenet_lhotse.formats.audio import as_float_samples, load_samples, resample
from wenet_lhotse.formats.layout import cut_source


@dataclass
class CutPipeline(FeatureRecipe):
    """A :class:`~wenet_lhotse.features.recipe.FeatureRecipe` and how to run it, picklable
    so it can be sent to worker processes once.

    Units: ``resample_to`` in Hz; ``speeds`` are tempo factors; dither is the
    extractor's (int16 units for the Kaldi-style extractors).
    """

    return_audio: bool = False
    features_on: str = "worker"

    def process(self, cut: Any, seed: int, augment: bool):
        """``(feats (frames, dim) float32, pcm (samples,) float32 or None)`` for one cut
        (a Cut, or a dict from ``to_dict()``, which is consumed); with ``features_on ==
        "device"``: ``(samples int16/float32, CutDraws)`` from
        :func:`~wenet_lhotse.features.device.plan_cut`. Any failure becomes a
        :class:`WenetDataError` naming the cut id and its audio source."""
        if isinstance(cut, dict):
            from lhotse.serialization import deserialize_item

            cut = deserialize_item(dict(cut))
        try:
            if self.features_on == "device":
                from wenet_lhotse.features.device import plan_cut

                return plan_cut(self, cut, seed, augment)
            return self._process(cut, seed, augment)
        except Exception as err:
            reraise_worker_death(err)
            raise WenetDataError(
                f"cut {cut.id!r}: cannot compute features: {type(err).__name__}: {err}",
                cut_source(cut), kind="bad_audio",
            ) from err

    def decode(self, cut: Any) -> Tuple[np.ndarray, int]:
        """``(float32 samples of one channel, sampling rate in Hz)``: :attr:`channel` of
        multi-channel audio (WeNet's ``singal_channel``), the only one of mono audio."""
        samples, sr = load_samples(cut, self.channel)
        return as_float_samples(samples), sr

    def _process(self, cut: Any, seed: int, augment: bool):
        samples, sr = self.decode(cut)
        if self.resample_to and sr != self.resample_to:
            samples = resample(samples, sr, self.resample_to)
            sr = int(self.resample_to)
        rng = random.Random(seed)
        if augment and self.speeds:  # first draw: planned_speed() relies on it
            factor = choose_speed(rng, self.speeds)
            samples = speed_perturb(samples, sr, factor)
        generator = torch.Generator().manual_seed(seed)
        dither = None if augment or self.eval_dither else 0.0
        if hasattr(self.extractor, "compute"):
            feats = self.extractor.compute([samples], sr, dither=dither, generator=generator)[0]
            feats = feats.numpy()
        else:  # any other Lhotse extractor: its own dither handling
            feats = np.asarray(self.extractor.extract(samples, sr), dtype=np.float32)
        for aug, cfg in (self.enabled() if augment else ()):
            feats = aug.run(feats, rng, cfg)
        feats = np.ascontiguousarray(feats, dtype=np.float32)
        return feats, (np.asarray(samples, dtype=np.float32) if self.return_audio else None)


@contextmanager
def one_torch_thread():
    """Run per-cut work on one torch thread, as pool workers do.

    Intra-op threads change float rounding (so results would depend on the pool size)
    and, on small per-utterance tensors, cost more than they save (measured 30x slower
    with 2 threads on a busy 2-core machine).
    """
    n = torch.get_num_threads()
    if n != 1:
        torch.set_num_threads(1)
    try:
        yield
    finally:
        if n != 1:
            torch.set_num_threads(n)
