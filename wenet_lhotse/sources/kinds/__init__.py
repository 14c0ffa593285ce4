"""The input kinds, one module each (see :mod:`.base` for what a kind declares and
:mod:`wenet_lhotse.sources.registry` for where each is registered)."""

from wenet_lhotse.sources.kinds.base import InputKind, PositionedReaders
from wenet_lhotse.sources.kinds.sniff import MAYBE, NO, SURE, FirstLine

__all__ = ["MAYBE", "NO", "SURE", "FirstLine", "InputKind", "PositionedReaders"]
