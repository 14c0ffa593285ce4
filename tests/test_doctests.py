"""The ``>>>`` examples in the docstrings of the public entry points run and hold."""

from __future__ import annotations

import doctest
import importlib

import pytest

#: Modules whose docstrings carry examples (cheap ones: no downloads, < 1 s each).
MODULES = [
    "wenet_lhotse.dataset.splits",
    "wenet_lhotse.features.augmentations",
    "wenet_lhotse.features.augmentations.base",
    "wenet_lhotse.features.fbank",
    "wenet_lhotse.features.recipe",
    "wenet_lhotse.features.strategy",
    "wenet_lhotse.io.policy",
    "wenet_lhotse.loader.build",
    "wenet_lhotse.loader.config",
    "wenet_lhotse.loader.lhotse_conf",
    "wenet_lhotse.loader.schema",
    "wenet_lhotse.sources.registry",
    "wenet_lhotse.text.tokenizer",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0, f"{name} has no >>> examples"
    assert result.failed == 0
