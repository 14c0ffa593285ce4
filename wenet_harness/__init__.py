"""Run WeNet's own code (a checkout at ``$WENET_ROOT``) next to wenet-lhotse.

``$WENET_ROOT`` defaults to ``<repo>/../shared/wenet`` (the pinned snapshot; ``.ci/run``
sets it). WeNet is not installable from the package index, and two of its module-level
imports cannot install here (torchaudio for torch 2.13 CPU, deepspeed): ``stubs/``
stands in for them, minimally -- see ``README.md`` in this folder.

* :func:`wenet_env` -- environment for a subprocess running WeNet
  (``PYTHONPATH = stubs : WENET_ROOT : repo``; ``stubs/sitecustomize.py`` applies the
  torch 2.13 shim at interpreter start).
* :func:`import_wenet` -- import WeNet modules into this process without leaving the
  stand-ins visible to anything imported later (see its docstring).
* :func:`torchaudio_kaldi` -- torchaudio's own Kaldi fbank/mfcc (the verbatim copy), for
  comparisons computed on the machine that runs the test; :func:`kaldi_reference` --
  the reference the feature tests and ``bench/features.py`` use (an installed
  torchaudio, else that copy).
* :func:`wenet_missing` -- why WeNet cannot be used here (None when it can); the
  ``wenet_root`` fixture in ``tests/conftest.py`` skips with it.

Shared by the tests and ``bench/``, at the repository's top level and not part of the
wheel (``pyproject.toml`` packages only ``wenet_lhotse*``): pytest imports it through its
``pythonpath = ["."]`` option, bench scripts through ``import _paths``
(``bench/_paths.py``, which appends the repository root to ``sys.path``).
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Dict, Iterable, List, Mapping, Optional, Tuple

REPO = Path(__file__).resolve().parents[1]
STUBS = Path(__file__).resolve().parent / "stubs"
#: the modules ``stubs/`` provides
STUBBED = ("torchaudio", "deepspeed")
#: the torchaudio release whose files ``stubs/torchaudio`` copies unchanged
TORCHAUDIO_VERSION = "2.11.0"


def wenet_root() -> Path:
    """``$WENET_ROOT``, else ``<repo>/../shared/wenet`` (which may not exist)."""
    env = os.environ.get("WENET_ROOT")
    return Path(env).resolve() if env else (REPO.parent / "shared" / "wenet").resolve()


def wenet_missing() -> Optional[str]:
    """A one-line reason why WeNet's code cannot run here, or None."""
    root = wenet_root()
    if not (root / "wenet" / "bin" / "train.py").is_file():
        return (f"WeNet's source not found at {root} (set WENET_ROOT to a WeNet checkout; "
                ".ci/run points it at ../shared/wenet)")
    for mod in ("langid", "librosa", "tensorboardX", "whisper"):
        if importlib.util.find_spec(mod) is None:
            return f"WeNet needs {mod!r}: pip install -e '.[wenet]'"
    return None


def wenet_pythonpath(extra: Iterable[str] = ()) -> str:
    """``stubs : WENET_ROOT : repo [: extra]``."""
    return os.pathsep.join([str(STUBS), str(wenet_root()), str(REPO), *map(str, extra)])


def wenet_env(base: Optional[Mapping[str, str]] = None, **extra: str) -> Dict[str, str]:
    """Environment for a subprocess that runs WeNet (and wenet-lhotse from this repo).

    Keeps ``base`` (default ``os.environ``) and any ``PYTHONPATH`` it had, after ours.
    """
    env = dict(os.environ if base is None else base)
    old = env.get("PYTHONPATH")
    env["PYTHONPATH"] = wenet_pythonpath([old] if old else [])
    env["WENET_ROOT"] = str(wenet_root())
    env.setdefault("OMP_NUM_THREADS", "1")
    env.update(extra)
    return env


def import_wenet(*modules: str) -> List[ModuleType]:
    """Import WeNet modules (e.g. ``"wenet.dataset.dataset"``) into this process.

    The stand-ins are on ``sys.path`` only while WeNet is imported; afterwards they are
    taken out of ``sys.path`` and ``sys.modules`` again, so nothing imported later
    (Lhotse checks ``find_spec("torchaudio")``) sees a torchaudio that isn't installed.
    WeNet's modules keep their references to the stand-ins. Returns the modules.
    """
    reason = wenet_missing()
    if reason:
        raise ImportError(reason)
    root = str(wenet_root())
    if root not in sys.path:
        sys.path.insert(0, root)
    return _import_with_stubs(modules or ("wenet",))


def torchaudio_kaldi() -> ModuleType:
    """torchaudio's own ``compliance/kaldi.py`` (2.11.0, the unchanged copy in
    ``stubs/``; needs no WeNet), imported as :func:`import_wenet` imports, so that the
    stand-in torchaudio is not left visible. For comparisons on the machine that runs
    the test: torch's FFT and matrix products round differently across CPUs (MKL picks
    its kernels per CPU), which moves low-energy log-mel values by up to ~3e-3 against
    a reference computed elsewhere."""
    return _import_with_stubs(("torchaudio.compliance.kaldi",))[0]


def kaldi_reference() -> Tuple[ModuleType, str]:
    """``(module, origin)``: the torchaudio ``compliance.kaldi`` that the feature tests and
    ``bench/features.py`` compare with -- an importable torchaudio (or the file named by
    ``$WENET_LHOTSE_KALDI_PY``, see :mod:`wenet_lhotse.features.reference`), else the
    harness's verbatim copy (:func:`torchaudio_kaldi`). Needs no set-up."""
    from wenet_lhotse.features.reference import load_torchaudio_kaldi

    kaldi, origin = load_torchaudio_kaldi()
    if kaldi is not None:
        return kaldi, origin
    return torchaudio_kaldi(), (f"torchaudio {TORCHAUDIO_VERSION}'s compliance/kaldi.py "
                                "(verbatim copy in wenet_harness/stubs)")


def sox_effects() -> ModuleType:
    """WeNet's ``torchaudio.sox_effects`` under the harness (libsox where soxbindings is
    installed, else the stand-in), imported as :func:`import_wenet` imports."""
    return _import_with_stubs(("torchaudio.sox_effects",))[0]


def sox_backend() -> str:
    """What runs WeNet's ``torchaudio.sox_effects`` under the harness: libsox itself
    (through ``soxbindings``, where installed) or the stand-in (torchaudio's sinc
    resampler cut to sox's length)."""
    return sox_effects().BACKEND


def _import_with_stubs(modules: Iterable[str]) -> List[ModuleType]:
    sys.path.insert(0, str(STUBS))
    try:
        import wenet_shims  # noqa: F401  (torch 2.13 shim, idempotent)

        return [importlib.import_module(m) for m in modules]
    finally:
        sys.path.remove(str(STUBS))
        for name in list(sys.modules):
            if name.split(".")[0] in STUBBED:
                del sys.modules[name]


def wenet_char_tokenizer(units: Path) -> object:
    """WeNet's own char tokenizer (``wenet.utils.init_tokenizer``) for a units file."""
    (init_tokenizer,) = import_wenet("wenet.utils.init_tokenizer")
    return init_tokenizer.init_tokenizer(
        {"tokenizer": "char", "tokenizer_conf": {"symbol_table_path": str(units),
                                                 "non_lang_syms_path": None,
                                                 "split_with_space": False}})
