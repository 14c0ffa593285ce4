"""The one place where ``train``, ``cv`` and ``infer`` differ.

WeNet's ``init_dataset`` turns augmentation, shuffling and cycling off for ``split !=
'train'`` (its cv keeps the yaml's dither); its ``recognize.py`` decodes without
``filter_conf`` limits on text it may not have. Every module that behaves per split asks
:func:`split_rules` for these flags instead of testing the split's name.

>>> split_rules("cv").augment, split_rules("cv").eval_dither, split_rules("infer").needs_text
(False, True, False)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict

SPLITS = ("train", "cv", "infer")


@dataclass(frozen=True)
class SplitRules:
    """How one split reads and batches its data."""

    name: str
    #: training: speed perturbation and spec_* on, a fresh random draw each epoch,
    #: sampler and list shuffling, WeNet's ``cycle``; metadata-only readers (the
    #: sampler holds many cuts); ranks stop together in streamed mode
    training: bool
    #: transcripts are needed (targets, filter_conf's token limits)
    needs_text: bool
    #: the extractor's dither applies without augmentation (WeNet's cv keeps it;
    #: ``lhotse_conf.cv_dither`` can turn it off or fix it)
    eval_dither: bool = False

    @property
    def augment(self) -> bool:
        """Speed perturbation, spec_* and dither drawn per epoch."""
        return self.training

    @property
    def shuffle(self) -> bool:
        """Sampler shuffling, ``list_shuffle`` and ``cycle`` apply."""
        return self.training

    @property
    def filter(self) -> bool:
        """WeNet's ``filter_conf`` applies (when a tokenizer is given)."""
        return self.needs_text


_RULES: Dict[str, SplitRules] = {
    "train": SplitRules("train", training=True, needs_text=True),
    "cv": SplitRules("cv", training=False, needs_text=True, eval_dither=True),
    "infer": SplitRules("infer", training=False, needs_text=False),
}


def split_rules(split: str) -> SplitRules:
    """The rules of ``split`` (``train``, ``cv`` or ``infer``); ValueError otherwise."""
    try:
        return _RULES[split]
    except (KeyError, TypeError):
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}") from None
