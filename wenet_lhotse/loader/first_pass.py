"""``lhotse_conf.index_first_pass``: a shard list without an index is streamed for its
first epoch, which writes the index as it goes; every later epoch samples through it.

Contract of :class:`FirstPassLoader` (the loader :func:`~.build.build_dataloader` returns
for training shard lists without an index when the key is on):

* **Epoch 0** is the streamed loader (:func:`~.build.build_streamed_loader`), unchanged:
  its batches, ledger, equal steps and resume (same world size). Each (rank, worker)
  writes the index rows of every tar it reads to its end as a fragment
  (:mod:`wenet_lhotse.formats.index_fragments`; the same rows ``wenet-lhotse index``
  makes, from the bytes the epoch reads anyway).
* **At the next** ``iter()`` the streamed workers are shut down and the index is
  written: under DDP (a gloo group) the ranks meet, index the tars that have no fragment
  (a tar not read to its end: the epoch stopped early, a ``pipe:`` line, a compressed
  tar) split across ranks, meet again, rank 0 writes the index (atomic; the bytes
  ``wenet-lhotse index`` writes for the same list), and they meet a third time. Without
  a process group each rank indexes what is missing and writes the same bytes itself.
* **Epoch 1 on** is the indexed map loader (:func:`~.build.build_map_loader` with the
  index): every utterance once per epoch across ranks, the ledger exact (the index's bad
  items counted each epoch, as the streamed epoch counted them), WeNet's step count,
  elastic resume.
* **State**: a state saved in epoch 0 is the streamed state and resumes streamed (same
  world size); a state at the end of epoch 0 or later resumes through the index (the
  index is written first when it is missing). A restart finds the index (and resumes a
  streamed state of epoch 0 streamed, without recording).

Everything else (``ledgers``, ``skip_report``, ``epoch``...) is the current loader's.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Dict, Iterator, List, Mapping, Sequence

from wenet_lhotse.formats.index_fragments import FirstPass
from wenet_lhotse.formats.shard_list import read_shard_entries
from wenet_lhotse.loader.distributed import gloo_group
from wenet_lhotse.loader.ledger import ReadOnce
from wenet_lhotse.sources.indexed_shards import index_dir, index_off, shard_indexes
from wenet_lhotse.sources.registry import get_kind

logger = logging.getLogger(__name__)


def first_pass_applies(specs: Sequence[Any]) -> bool:
    """Whether ``index_first_pass`` has work to do: a source is a shard list."""
    return any(get_kind(s.type).indexable for s in specs)


def first_pass_lists(plan: Any) -> List[str]:
    """The shard lists whose index the first epoch writes; ValueError (naming the key)
    where the sources or settings do not allow it."""
    lconf = plan.cfg.lhotse
    if lconf.mode != "auto" or index_off(lconf.shard_index):
        raise ValueError("lhotse_conf.index_first_pass: needs lhotse_conf.mode 'auto' and "
                         "lhotse_conf.shard_index 'auto', true or a directory")
    lists: List[str] = []
    for spec in plan.specs:
        if not get_kind(spec.type).indexable or spec.fields is not None or not spec.paths:
            raise ValueError(f"lhotse_conf.index_first_pass: source {spec.name} is not a "
                             "shard list (only shard lists get an index)")
        lists += [str(p) for p in spec.paths]
    return lists


class FirstPassLoader:
    """See the module doc. ``build_streamed(plan, dataset)`` / ``build_map(plan,
    dataset)`` make the two loaders; ``indexed``: the index already exists (a restart)."""

    def __init__(self, plan: Any, dataset: Any, build_streamed: Callable[..., Any],
                 build_map: Callable[..., Any], indexed: bool = False) -> None:
        self._plan, self._dataset = plan, dataset
        self._build_streamed, self._build_map = build_streamed, build_map
        self.lists = first_pass_lists(plan)
        self.recorder = FirstPass(index_dir(plan.cfg.lhotse.shard_index))
        for list_file in self.lists:
            self.recorder.index_path(list_file)  # a remote list without a cache dir: now
        self._indexed = indexed
        self.progress_every = 0
        self.inner: Any = None
        if indexed:
            self._switch(0)
        else:
            self._streamed(record=True)

    # -- the two loaders

    def _streamed(self, record: bool) -> None:
        self.inner = self._build_streamed(self._plan, self._dataset)
        if record:
            self.inner.dataset.recorder = self.recorder

    def _switch(self, epoch: int) -> None:
        """Shut the streamed loader down, make sure the index exists, and continue with
        the map loader at ``epoch``."""
        old = self.inner
        if old is not None:
            it = getattr(old, "_iterator", None)
            if it is not None and hasattr(it, "_shutdown_workers"):
                it._shutdown_workers()  # the persistent streamed workers
            old._iterator = None
        if not self._indexed:
            self._write_index()
            self._indexed = True
        plan = self._plan
        if len(plan.indexes) != len(plan.specs):  # not opened by build_dataloader
            plan.read_once = ReadOnce(plan.skip_report)  # the index's start-up checks
            plan.loader_kw = {**plan.loader_kw, "read_once": plan.read_once}
            with plan.reading_once():
                plan.indexes = shard_indexes(plan.specs, plan.cfg.lhotse, plan.split,
                                             policy=plan.policy)
            if len(plan.indexes) != len(plan.specs):
                raise RuntimeError("lhotse_conf.index_first_pass: the index written after "
                                   "the first epoch was not found or is not valid")
        loader = self._build_map(plan, self._dataset)
        if epoch:  # the index's start-up skips counted again, not the bucket edges' reads
            loader.starts_at_a_later_epoch()
        if old is not None:
            loader.ledgers = list(old.ledgers)
        loader.bucketing_sampler.set_epoch(epoch)
        loader.epoch = epoch - 1
        loader.progress_every = self.progress_every
        self.inner = loader

    def _write_index(self) -> None:
        plan, rec = self._plan, self.recorder
        group = gloo_group() if plan.world_size > 1 else None
        if group is not None:
            import torch.distributed as dist

            dist.barrier(group=group)  # every rank's first epoch is over: its fragments
            missing = [e for lf in self.lists
                       for e in rec.missing(read_shard_entries(lf, policy=plan.policy))]
            rec.index_missing(missing[plan.rank::plan.world_size], plan.policy)
            dist.barrier(group=group)
            if plan.rank == 0:
                self._assemble()
            dist.barrier(group=group)
        else:
            self._assemble()

    def _assemble(self) -> None:
        for list_file in self.lists:
            path = self.recorder.assemble(list_file, self._plan.policy)
            logger.info("%s: shard index written by the first epoch: %s", list_file, path)

    # -- the loader protocol

    def _next_epoch(self) -> int:
        restored = getattr(self.inner, "_restored", None)
        return int(restored["epoch"]) if restored is not None else self.inner.epoch + 1

    def __iter__(self) -> Iterator[Any]:
        if self.inner.mode == "streamed" and self._next_epoch() >= 1:
            self._switch(self._next_epoch())
        self.inner.progress_every = self.progress_every
        return iter(self.inner)

    def __len__(self) -> int:
        return len(self.inner)

    def state_dict(self) -> Dict[str, Any]:
        return self.inner.state_dict()

    def load_state_dict(self, sd: Mapping[str, Any]) -> None:
        """A streamed state of epoch 0 resumes streamed; any other resumes through the
        index (see the module doc)."""
        if sd.get("mode") == "map":
            if self.inner.mode != "map":
                self._switch(0)
        elif int(sd.get("epoch", 0)) >= 1 and not sd.get("per_worker"):
            self._switch(int(sd["epoch"]))  # the first epoch is over: through the index
            return
        elif int(sd.get("epoch", 0)) >= 1:
            raise ValueError(f"a streamed state saved in epoch {sd['epoch']}: with "
                             "lhotse_conf.index_first_pass only epoch 0 is streamed")
        elif self.inner.mode != "streamed":
            self._streamed(record=False)  # the index exists: epoch 0 needs no recording
        self.inner.load_state_dict(sd)

    def __getattr__(self, name: str) -> Any:
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)
