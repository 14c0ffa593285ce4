"""When ``iter()`` starts the next epoch: :class:`EpochAdvance`, the one implementation
for everything that keeps its own epoch -- the map-style sampler
(``loader.sampler``), the mixed-by-batch and text samplers (``loader.batch_mux``,
``loader.text_sampler``), the fixed batches of WeNet's list order and cv/infer
(``loader.map_items.FixedBatches``) and each streamed worker's dataset (``loader.streamed``).

The rule, as torch's samplers and Lhotse's expect: each ``iter()`` starts the next epoch
(the first one starts epoch ``epoch`` as set), unless ``set_epoch`` was called since the
last ``iter()`` (that epoch, as given) or a state was just restored (the restored epoch,
at the restored position: that ``iter()`` resumes, it starts nothing).
"""

from __future__ import annotations


class EpochAdvance:
    """Mixin: ``epoch`` and the rule above. Call :meth:`_init_epochs` in ``__init__``,
    :meth:`_start_iter` at the top of ``__iter__`` and :meth:`_restored_at` in
    ``load_state_dict``; ``set_epoch`` is provided (extend it to forward the epoch)."""

    epoch: int
    _started: bool  # an iter() (or a restored state) has happened
    _explicit: bool  # set_epoch() called since the last iter()
    _restored: bool  # load_state_dict() since the last iter(): resume, do not restart

    def _init_epochs(self, epoch: int = 0) -> None:
        self.epoch = epoch
        self._started = self._explicit = self._restored = False

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        self._explicit = True

    def _start_iter(self) -> bool:
        """At ``iter()``: ``False`` when it resumes a just restored state (keep the
        position); else advance the epoch as the rule says and return ``True`` (the
        caller starts the epoch ``self.epoch`` afresh)."""
        if self._restored:
            self._restored = False
            return False
        if self._started and not self._explicit:
            self.epoch += 1
        self._started, self._explicit = True, False
        return True

    def _restored_at(self, epoch: int, *, resume: bool = True) -> None:
        """A state was loaded for ``epoch``: the next ``iter()`` resumes it (``resume``),
        or, for a state saved before its epoch began, starts ``epoch`` itself."""
        self.epoch = int(epoch)
        self._started = True
        self._restored, self._explicit = resume, not resume
