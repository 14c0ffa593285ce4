"""Planned cut lengths for batching: :class:`~wenet_lhotse.features.recipe.CutLengths`
and :class:`~wenet_lhotse.features.recipe.FrameCounter` (they live with the feature
recipe, which they must agree with; this is their old import path)."""

from __future__ import annotations

from typing import Any, Mapping

from wenet_lhotse.features.recipe import CutLengths, FrameCounter

__all__ = ["CutLengths", "FrameCounter", "cut_lengths_from_wenet_conf"]


def cut_lengths_from_wenet_conf(dataset_conf: Mapping[str, Any], *, train: bool, seed: int
                                ) -> CutLengths:
    """Lengths as :func:`~wenet_lhotse.loader.wenet_dataset.make_wenet_dataset`'s pipeline
    makes them (the split's :class:`~wenet_lhotse.features.recipe.FeatureRecipe`)."""
    from wenet_lhotse.features.recipe import FeatureRecipe

    return FeatureRecipe.from_wenet_conf(dataset_conf, augment=train).lengths(seed)
