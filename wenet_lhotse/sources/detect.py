"""What kind of input a path is: :func:`detect_input_kind` and the kind tables, derived
from :mod:`wenet_lhotse.sources.registry` (where kinds are registered and detection's
rules are described: from the content, never from the name alone).

:data:`KINDS`, :data:`WENET_KINDS` and :data:`TAR_LIST_KINDS` are the registry's kinds
by flag, kept under their old names.
"""

from __future__ import annotations

from typing import Dict

from lhotse.utils import Pathlike

from wenet_lhotse.errors import WenetDataError
from wenet_lhotse.sources.registry import detect, kind_names, kinds

#: Every kind :func:`detect_input_kind` returns, and what it is.
KINDS: Dict[str, str] = {k.name: k.description for k in kinds() if k.detected}
#: The kinds WeNet itself reads (its ``data_type``).
WENET_KINDS = kind_names(wenet=True)
#: A ``data_type`` as our CLI takes it (``wenet-lhotse bench --data-type``: WeNet's two and
#: ours) -> the source type of a ``lhotse_conf.sources`` entry.
DATA_TYPES = {"raw": "raw", "shard": "shard", "lhotse": "cuts", "cuts": "cuts", "shar": "shar",
              "auto": "auto"}
#: Kinds whose sources list tar files (WeNet shards).
TAR_LIST_KINDS = kind_names(lists_tars=True)


def detect_input_kind(path: Pathlike, wenet_only: bool = False) -> str:
    """One of :data:`KINDS` for ``path`` (see :func:`~.registry.detect`). Raises
    :class:`WenetDataError` for a missing path, and with ``wenet_only`` for anything
    but a WeNet list (``raw``/``shard``)."""
    kind = detect(path)
    if wenet_only and kind not in WENET_KINDS:
        raise WenetDataError(f"expected a WeNet data.list, found a Lhotse {kind} input",
                             str(path), kind="format")
    return kind


def detect_data_type(path: Pathlike) -> str:
    """WeNet's ``data_type`` of a list file: ``"raw"`` or ``"shard"``."""
    return detect_input_kind(path, wenet_only=True)


#: The loader's name for the same detector.
detect_source_type = detect_input_kind
