"""The shape of one feature augmentation: everything about it in one class.

A :class:`FeatureAugmentation` is one of WeNet's per-utterance augmentations of the
feature matrix (``wenet/dataset/processor.py``: ``spec_aug``, ``spec_sub``,
``spec_trim``), declared once with:

* its ``dataset_conf`` keys: the switch :attr:`~FeatureAugmentation.name` and its
  settings ``<name>_conf``, whose fields are those of :attr:`~FeatureAugmentation.config`
  (a frozen dataclass: WeNet's defaults; the field metadata ``minimum`` is the integer
  check :mod:`~wenet_lhotse.loader.schema` reports against), and whether WeNet turns it on
  when ``dataset_conf`` is silent (:attr:`~FeatureAugmentation.wenet_default`);
* its random draws (:meth:`~FeatureAugmentation.draw`), made with the cut's
  ``random.Random`` in WeNet's order -- the one place they are made, so execution,
  planning and the device path see the same ones;
* its apply on one cut's CPU features (:meth:`~FeatureAugmentation.apply`, numpy) and on
  a padded batch on the training device (:meth:`~FeatureAugmentation.apply_batch`, torch);
* its effect on the frame count (:meth:`~FeatureAugmentation.frames`), which batching
  plans with.

The registry (:data:`wenet_lhotse.features.augmentations.AUGMENTATIONS`) lists them in
the order WeNet applies them; the recipe, the pipeline, the device path and the config
check iterate it.

Where it differs from WeNet: WeNet draws and applies in one function; here the draws are
separate (a draw is data: it travels from a DataLoader worker to the device path), made
by the same ``randint`` calls in the same order, so the output is the same.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Any, Dict, Sequence, Union

import numpy as np
import torch


def minimum(value: int) -> Dict[str, int]:
    """Field metadata: the setting is an integer ``>= value`` (the config check's rule).

    >>> minimum(1)
    {'minimum': 1}
    """
    return {"minimum": int(value)}


def as_config(value: Union[None, bool, Dict[str, Any], Any], cls: type) -> Any:
    """``None``/``False`` -> None (off), ``True`` -> ``cls()`` (WeNet's defaults), a dict
    -> ``cls(**dict)``, a ``cls`` -> itself.

    >>> from wenet_lhotse.features.augmentations.spec_sub import SpecSubConfig
    >>> as_config({"max_t": 30}, SpecSubConfig), as_config(False, SpecSubConfig)
    (SpecSubConfig(max_t=30, num_t_sub=3), None)
    """
    if value is None or value is False:
        return None
    if value is True:
        return cls()
    if isinstance(value, dict):
        return cls(**value)
    if isinstance(value, cls):
        return value
    raise TypeError(f"expected None, bool, dict or {cls.__name__}, got {type(value).__name__}")


class FeatureAugmentation:
    """One feature augmentation (see the module docstring). Subclasses set the class
    attributes and implement :meth:`draw`, :meth:`apply` and :meth:`apply_batch`;
    :meth:`frames` defaults to "the frame count is unchanged"."""

    #: the ``dataset_conf`` switch (``spec_sub: true``); settings under ``<name>_conf``
    name: str = ""
    #: the settings' frozen dataclass; its defaults are WeNet's
    config: type = type(None)
    #: on when ``dataset_conf`` does not mention :attr:`name` (WeNet: spec_aug only)
    wenet_default: bool = False
    #: whether :meth:`frames` may change the count (planning then makes the draws)
    changes_frames: bool = False

    @property
    def conf_key(self) -> str:
        """The ``dataset_conf`` key of the settings (``spec_sub_conf``)."""
        return f"{self.name}_conf"

    def minimums(self) -> Dict[str, int]:
        """``{setting: smallest value allowed}`` for every field of :attr:`config`."""
        return {f.name: int(f.metadata.get("minimum", 0))
                for f in dataclasses.fields(self.config)}

    def settings(self, value: Union[None, bool, Dict[str, Any], Any]) -> Any:
        """The settings for a loose value, as :func:`as_config` reads it."""
        return as_config(value, self.config)

    def draw(self, frames: int, bins: int, rng: random.Random, cfg: Any) -> Any:
        """The random draws for a ``(frames, bins)`` feature matrix (picklable data)."""
        raise NotImplementedError

    def apply(self, feats: np.ndarray, draw: Any) -> np.ndarray:
        """One cut's ``(frames, bins)`` float32 features augmented by ``draw``; the input
        is not modified (a copy, or a view of it)."""
        raise NotImplementedError

    def apply_batch(self, feats: torch.Tensor, draws: Sequence[Any]) -> torch.Tensor:
        """The device path: ``feats`` ``(B, T, F)`` (row ``b`` holds cut ``b``'s frames,
        zero-padded to ``T``) augmented row by row by ``draws`` (``None``: row not
        augmented); may work in place. A frame-count change is :meth:`frames`' job (the
        caller cuts the rows), not this one's."""
        raise NotImplementedError

    def frames(self, frames: int, draw: Any) -> int:
        """The frame count after the augmentation of ``frames`` frames with ``draw``."""
        return frames

    def run(self, feats: np.ndarray, rng: random.Random, cfg: Any) -> np.ndarray:
        """Draw with ``rng`` and apply: WeNet's function with an explicit RNG."""
        draw = self.draw(int(feats.shape[0]), int(feats.shape[1]), rng, cfg)
        return self.apply(feats, draw)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"
