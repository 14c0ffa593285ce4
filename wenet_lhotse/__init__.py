"""wenet-lhotse: WeNet speech-recognition training input on top of Lhotse.

The public API is re-exported here. Submodules are imported on first use
(PEP 562), so ``import wenet_lhotse`` stays cheap and never fails because an
optional package (torchaudio, sentencepiece, matplotlib) is missing.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS = {
    # synthetic corpus
    "generate_corpus": "wenet_lhotse.corpus",
    "CorpusPaths": "wenet_lhotse.corpus",
    # errors
    "WenetDataError": "wenet_lhotse.formats.errors",
    "SkipReport": "wenet_lhotse.formats.errors",
    "SkippedItem": "wenet_lhotse.formats.errors",
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'wenet_lhotse' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return __all__
