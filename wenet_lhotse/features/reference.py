"""Find torchaudio's Kaldi compliance module, to compare against (tests, bench).

torchaudio is optional (its wheels pin a CUDA torch). When ``import torchaudio`` fails,
the environment variable ``WENET_LHOTSE_KALDI_PY`` may point at a copy of
``torchaudio/compliance/kaldi.py`` taken from a torchaudio wheel, loaded standalone
(its ``import torchaudio`` line must be patched out; only ``mfcc`` needs
``torchaudio.functional.create_dct``). Nothing of torchaudio ships with this package.
The tests and ``bench/features.py`` ask ``wenet_harness.kaldi_reference()`` (repository
only), which falls back to the WeNet harness's unchanged copy of torchaudio 2.11.0's
file when this finds nothing.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from types import ModuleType
from typing import Optional, Tuple

logger = logging.getLogger(__name__)

ENV_VAR = "WENET_LHOTSE_KALDI_PY"


def load_torchaudio_kaldi() -> Tuple[Optional[ModuleType], str]:
    """``(module, origin)``: ``torchaudio.compliance.kaldi`` if importable, else the file
    named by ``$WENET_LHOTSE_KALDI_PY``, else ``(None, reason)``."""
    try:
        import torchaudio.compliance.kaldi as kaldi  # noqa: F401

        return kaldi, "torchaudio " + getattr(__import__("torchaudio"), "__version__", "?")
    except Exception as err:  # ImportError, or a torchaudio/torch ABI mismatch
        reason = f"torchaudio not importable ({type(err).__name__})"
    path = os.environ.get(ENV_VAR)
    if not path:
        return None, reason + f"; {ENV_VAR} not set"
    try:
        spec = importlib.util.spec_from_file_location("_wenet_lhotse_ta_kaldi", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except Exception as err:
        logger.warning("cannot load %s=%s: %s", ENV_VAR, path, err)
        return None, reason + f"; loading {path} failed: {err}"
    return module, f"{path} (standalone)"
