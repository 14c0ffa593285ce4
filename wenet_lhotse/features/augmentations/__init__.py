"""WeNet's feature augmentations, one module each, registered in one ordered list.

:data:`AUGMENTATIONS` is the registry: every
:class:`~wenet_lhotse.features.augmentations.base.FeatureAugmentation`, in the order
WeNet applies them (``wenet/dataset/dataset.py``: ``spec_aug`` -> ``spec_sub`` ->
``spec_trim``, after feature extraction). The recipe's settings and draws, the CPU
pipeline, the device path, the planned frame counts and the ``dataset_conf`` checks all
iterate it. Adding one is a module here plus its line below.

>>> [a.name for a in AUGMENTATIONS]
['spec_aug', 'spec_sub', 'spec_trim']
"""

from __future__ import annotations

from typing import Dict, Tuple

from wenet_lhotse.features.augmentations.base import FeatureAugmentation, as_config
from wenet_lhotse.features.augmentations.spec_aug import SPEC_AUG, SpecAugConfig
from wenet_lhotse.features.augmentations.spec_sub import SPEC_SUB, SpecSubConfig
from wenet_lhotse.features.augmentations.spec_trim import SPEC_TRIM, SpecTrimConfig

#: Every feature augmentation, in WeNet's order of application.
AUGMENTATIONS: Tuple[FeatureAugmentation, ...] = (
    SPEC_AUG,
    SPEC_SUB,
    SPEC_TRIM,
)

#: name -> augmentation
BY_NAME: Dict[str, FeatureAugmentation] = {a.name: a for a in AUGMENTATIONS}

__all__ = ["AUGMENTATIONS", "BY_NAME", "FeatureAugmentation", "SpecAugConfig",
           "SpecSubConfig", "SpecTrimConfig", "as_config"]
