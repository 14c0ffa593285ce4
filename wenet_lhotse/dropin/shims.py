"""Stand-ins for what WeNet imports at module level but never calls when wenet-lhotse
serves its data, so that WeNet's unmodified ``train.py`` / ``recognize.py`` import on a
machine without them.

What, and why (WeNet at the pinned snapshot):

* ``deepspeed`` -- ``wenet/utils/train_utils.py`` imports it and three of its functions at
  module level; it needs CUDA to build. With ``--train_engine torch_ddp`` WeNet only calls
  ``deepspeed.add_config_arguments``, which the stand-in serves as DeepSpeed does (adds
  ``--deepspeed``, ``--deepspeed_config`` and the hidden ``--deepscale``,
  ``--deepscale_config``). Anything else called raises :class:`MissingDependency`: one line
  naming deepspeed and saying to use ``--train_engine torch_ddp`` or install it.
* ``torchaudio`` -- ``wenet/dataset/processor.py`` (WeNet's own data pipeline, which the
  drop-in replaces), ``wenet/utils/ctc_utils.py`` (forced alignment),
  ``wenet/models/transducer`` (``rnnt_loss``) and ``wenet/models/paraformer/cif.py`` (only
  ``typing.Tuple``, through ``torchaudio.compliance.kaldi``) import it at module level; its
  last wheels need another torch than the current one. Any torchaudio function called
  raises :class:`MissingDependency` naming it and what to install; nothing is computed.
* ``torch.nn.modules.conv``'s ``Union``, ``Optional``, ``Tensor`` -- imported from there by
  ``wenet/models/squeezeformer/conv2d.py``; torch 2.13 no longer re-exports them, and
  ``import wenet`` imports every model.

Real packages win: a stand-in is made only when ``importlib.util.find_spec`` finds no real
module (and the conv names only where torch lacks them). :func:`stand_ins` puts the stand-in
modules into ``sys.modules`` only while WeNet is imported and takes them out afterwards
(WeNet's modules keep their references), so Lhotse's ``find_spec("torchaudio")`` and
everything imported later see no torchaudio, exactly as on the machine without it. WeNet's
data processing is never stood in: the drop-in serves the data.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import typing
from contextlib import contextmanager
from types import ModuleType
from typing import Any, Callable, Dict, Iterator, List

#: what to install for each stood-in package (the second half of the one-line error)
INSTALL_HINT = {
    "deepspeed": "use --train_engine torch_ddp, or pip install deepspeed",
    "torchaudio": "pip install torchaudio built for torch {torch}",
}


class MissingDependency(RuntimeError):
    """WeNet called something of a package that is not installed (and was stood in only
    so that WeNet imports). ``str(err)`` is one line: what was called, what to install."""


def _refusal(package: str, name: str) -> Callable[..., Any]:
    """A function that raises :class:`MissingDependency` for ``name`` of ``package``."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        import torch

        hint = INSTALL_HINT[package].format(torch=torch.__version__.split("+")[0])
        raise MissingDependency(f"{name} was called, but {package} is not installed "
                                f"(wenet-lhotse only stood it in for WeNet's imports): {hint}")

    refuse.__name__ = name.rsplit(".", 1)[-1]
    refuse.__qualname__ = name
    return refuse


def _module(name: str, package: str, attrs: Dict[str, Any]) -> ModuleType:
    """A stand-in module: ``attrs``, and a refusing function for any other public name."""
    mod = ModuleType(name, f"wenet-lhotse stand-in for {name} (not installed)")
    mod.__dict__.update(attrs)
    mod.__spec__ = importlib.util.spec_from_loader(name, loader=None, is_package=True)
    mod.__path__ = []  # a package: submodules resolve through sys.modules

    def __getattr__(attr: str) -> Any:  # noqa: N807 - PEP 562 module attribute hook
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _refusal(package, f"{name}.{attr}")

    mod.__getattr__ = __getattr__  # type: ignore[method-assign]
    return mod


def _add_config_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """DeepSpeed's own ``add_config_arguments``: its argument group and four flags."""
    group = parser.add_argument_group("DeepSpeed", "DeepSpeed configurations")
    group.add_argument("--deepspeed", default=False, action="store_true",
                       help="Enable DeepSpeed (not installed: stand-in)")
    group.add_argument("--deepspeed_config", default=None, type=str,
                       help="DeepSpeed json configuration file.")
    group.add_argument("--deepscale", default=False, action="store_true",
                       help=argparse.SUPPRESS)
    group.add_argument("--deepscale_config", default=None, type=str, help=argparse.SUPPRESS)
    return parser


def _package(root: str, children: List[str], attrs: Dict[str, Dict[str, Any]]) -> \
        Dict[str, ModuleType]:
    """Stand-in modules ``root`` and ``root.<child>`` (dotted), parents holding children."""
    mods = {root: _module(root, root, attrs.get(root, {}))}
    for child in children:
        parts = child.split(".")
        for i in range(1, len(parts) + 1):
            name = ".".join([root, *parts[:i]])
            if name not in mods:
                mods[name] = _module(name, root, attrs.get(name, {}))
                parent = name.rsplit(".", 1)[0]
                setattr(mods[parent], parts[i - 1], mods[name])
    return mods


def deepspeed_modules() -> Dict[str, ModuleType]:
    """``deepspeed`` and the submodules WeNet's ``train_utils`` imports from."""
    return _package("deepspeed", ["runtime.zero.stage3", "runtime.zero.stage_1_and_2",
                                  "utils.zero_to_fp32"],
                    {"deepspeed": {"add_config_arguments": _add_config_arguments}})


def torchaudio_modules() -> Dict[str, ModuleType]:
    """``torchaudio`` and the submodules WeNet imports (every function refuses)."""
    return _package("torchaudio", ["compliance.kaldi", "functional", "transforms",
                                   "sox_effects"],
                    {"torchaudio": {"__version__": "0.0.0+wenet-lhotse-stand-in"},
                     # wenet/models/paraformer/cif.py: from torchaudio.compliance.kaldi
                     # import Tuple (kaldi.py's own `from typing import Tuple`)
                     "torchaudio.compliance.kaldi": {"Tuple": typing.Tuple}})


#: stand-in builders, by the top-level package they stand in for
BUILDERS: Dict[str, Callable[[], Dict[str, ModuleType]]] = {
    "deepspeed": deepspeed_modules,
    "torchaudio": torchaudio_modules,
}

#: the names squeezeformer imports from torch.nn.modules.conv
CONV_NAMES = (("Union", typing.Union), ("Optional", typing.Optional))


def missing_packages() -> List[str]:
    """The stood-in packages with no real module here (``find_spec`` is None)."""
    out = []
    for name in BUILDERS:
        if name in sys.modules:
            continue
        try:
            found = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            found = None
        if found is None:
            out.append(name)
    return out


def restore_conv_names() -> bool:
    """Put ``Union``, ``Optional``, ``Tensor`` back on ``torch.nn.modules.conv`` where torch
    lacks them. True when any was missing."""
    import torch
    import torch.nn.modules.conv as conv

    added = False
    for name, value in (*CONV_NAMES, ("Tensor", torch.Tensor)):
        if not hasattr(conv, name):
            setattr(conv, name, value)
            added = True
    return added


@contextmanager
def stand_ins() -> Iterator[List[str]]:
    """While inside, ``sys.modules`` holds a stand-in for each missing package (see the
    module docstring); yields what was stood in (e.g. ``["deepspeed (not installed)",
    ...]``). On exit the stand-in modules leave ``sys.modules``;
    modules imported inside keep their references to them."""
    installed: List[str] = []
    added: Dict[str, ModuleType] = {}
    for package in missing_packages():
        mods = BUILDERS[package]()
        added.update(mods)
        installed.append(f"{package} (not installed)")
    sys.modules.update(added)
    if restore_conv_names():
        installed.append("torch.nn.modules.conv's Union, Optional, Tensor (not in this torch)")
    try:
        yield installed
    finally:
        for name, mod in added.items():
            if sys.modules.get(name) is mod:
                del sys.modules[name]
