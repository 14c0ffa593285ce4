"""Source tags on cuts: :class:`TagCuts` writes a source's ``tags`` (``task``, ``lang``,
any key) to ``cut.custom`` of each of its cuts, where the dataset reads ``task``/``lang``
into the batch's ``tasks``/``langs``. Keys the cut already has win."""

from __future__ import annotations

from typing import Any, Mapping

from lhotse.cut import Cut
from lhotse.lazy import Dillable
from lhotse.utils import fastcopy

from wenet_lhotse.sources.meta_cut import MetaCut


class TagCuts(Dillable):
    """Picklable ``cut -> cut`` that adds ``tags`` to ``cut.custom`` (existing keys win)."""

    def __init__(self, tags: Mapping[str, Any]) -> None:
        self.tags = dict(tags)

    def __call__(self, cut: Cut) -> Cut:
        if not self.tags:
            return cut
        if isinstance(cut, MetaCut):  # tags go into the cut it builds
            return cut.tagged(self.tags)
        custom = dict(self.tags)
        custom.update(cut.custom or {})
        return fastcopy(cut, custom=custom)
