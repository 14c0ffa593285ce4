"""WeNet's ``dataset_conf.cycle`` and ``list_shuffle`` on positioned readers.

``cycle: C`` -- WeNet repeats its list ``C`` times inside one pass of the loader
(``TextLineDataPipe(...).shuffle().repeat(C)``); its ``train.py`` sets
``cycle = max_epoch`` in step mode (``save_interval`` in the yaml) and runs one
"epoch". :class:`CycledReader` does the same to a reader: ``C`` passes, each with the
list in a new order (pass ``p`` of epoch ``e`` is the reader's epoch ``e * C + p``), one
stream of positions ``p * n + i``, so the sampler batches across the pass boundaries as
WeNet's batcher does: the total number of batches is WeNet's.

WeNet's ``list_shuffle`` (the line or file order of each pass) is the readers' own
shuffling (:func:`~.positioned.buffer_shuffle_order`).
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, Optional, Tuple

from lhotse.cut import Cut

from wenet_lhotse.sources.positioned import PositionedReader


class CycledReader(PositionedReader):
    """``cycle`` passes over ``reader`` as one epoch (see the module docstring).

    :param reader: the source's reader; its own ``set_epoch`` reshuffles each pass.
    :param cycle: passes per epoch (WeNet's ``dataset_conf.cycle``), ``>= 1``.
    """

    def __init__(self, reader: PositionedReader, cycle: int) -> None:
        if cycle < 1:
            raise ValueError(f"dataset_conf.cycle must be >= 1, got {cycle}")
        self.reader = reader
        self.cycle = int(cycle)
        self.epoch = 0
        self._n: Optional[int] = None

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        self.reader.set_epoch(epoch * self.cycle)

    def _pass_len(self) -> int:
        """Positions per pass (the reader's ``len`` or one count, then remembered)."""
        if self._n is None:
            try:
                self._n = len(self.reader)  # type: ignore[arg-type]
            except TypeError:
                last = -1
                for pos, _ in self.reader.iter_from(0):
                    last = pos
                self._n = last + 1
        return self._n

    def _use_pass(self, p: int) -> None:
        self.reader.set_epoch(self.epoch * self.cycle + p)

    def iter_from(self, start: int) -> Iterator[Tuple[int, Cut]]:
        n = self._pass_len()
        if n == 0:
            return
        for p in range(start // n, self.cycle):
            self._use_pass(p)
            first = start - p * n if p == start // n else 0
            for pos, cut in self.reader.iter_from(first):
                yield p * n + pos, cut

    def read_raw(self, positions: set) -> Dict[int, Any]:
        n = self._pass_len()
        out: Dict[int, Any] = {}
        for p in sorted({pos // n for pos in positions}):
            self._use_pass(p)
            inner = self.reader.read_raw({pos - p * n for pos in positions if pos // n == p})
            out.update({p * n + k: v for k, v in inner.items()})
        return out

    def materialize(self, raw: Any) -> Cut:
        return self.reader.materialize(raw)

    def raw_for_state(self, cut: Any) -> Optional[Any]:
        return self.reader.raw_for_state(cut)

    def raw_from_state(self, raw: Any) -> Any:
        return self.reader.raw_from_state(raw)

    def state(self) -> Dict[str, Any]:
        return {"inner": self.reader.state(), "pass_len": self._n}

    def load_state(self, state: Dict[str, Any]) -> None:
        self.reader.load_state(state.get("inner") or {})
        if state.get("pass_len") is not None:
            self._n = int(state["pass_len"])

    def __len__(self) -> int:
        return self._pass_len() * self.cycle
