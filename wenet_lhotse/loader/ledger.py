"""The epoch ledger: what became of every utterance of an epoch, on this rank.

At the end of each epoch the loader (:class:`~.dataloader.LhotseDataLoader`) logs one
INFO line per rank (logger ``wenet_lhotse.loader.ledger``) and keeps the
:class:`EpochLedger` as ``loader.epoch_ledger()``::

    trained + skipped + filtered + left_over == total

* ``trained``: utterances in the batches the training loop consumed (a batch's
  ``keys`` when it has them, else the cuts the sampler put in it); a cv pass's line says
  ``evaluated``, an infer pass's ``decoded`` (the field keeps its name);
* ``skipped``: items left out as bad input in fault-tolerant mode, each named in
  ``loader.skip_report`` (a damaged tar's unreadable tail is one item, naming the tar),
  counted again in every epoch: an item of metadata read once and reused (a raw list's
  probed headers, a cv plan, a shard index's start-up checks) is re-counted at the start
  of each later epoch (:class:`ReadOnce`), as a source re-read each epoch meets it again;
* ``filtered``: utterances removed by the yaml's ``filter_conf``;
* ``left_over``: utterances read but not trained this epoch: the batches a rank drew
  after every rank stopped at the same step (``equal_steps``), or after
  ``steps_per_epoch``. They are counted by reading the rest of the rank's tars with
  no audio decoded (see :class:`~.streamed.StreamedEpochDataset`), never dropped
  unseen.

Scope: streamed loading (tar shards, Shar streamed) reads each rank's own tars, so each
rank's ledger covers its own share. Map-style loading reads every cut's metadata on
every rank: reader skips and filtered utterances are reported by rank 0 only, so that
the ledgers of all ranks sum to the epoch's utterances in either mode.

Counts travel from DataLoader workers to the training process beside each batch
(:class:`BatchCounts` in :class:`~.streamed.WorkerBatch`), as skipped items do.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any, Dict, Iterator, NamedTuple

logger = logging.getLogger(__name__)


class BatchCounts(NamedTuple):
    """What a worker read for one batch, beside it: ``trained`` utterances in the batch,
    ``filtered`` utterances the filters removed since the previous batch."""

    trained: int = 0
    filtered: int = 0


def batch_size_of(batch: Any, drawn: int) -> int:
    """Utterances in a dataset's output: ``len(batch["keys"])`` for WeNet's batch dict
    (cuts dropped as bad audio are not in it), else ``drawn`` (the sampler's cuts)."""
    if isinstance(batch, dict) and isinstance(batch.get("keys"), (list, tuple)):
        return len(batch["keys"])
    return drawn


#: what the ledger line says became of the utterances in the batches, per split
VERBS = {"train": "trained", "cv": "evaluated", "infer": "decoded"}


class ReadOnce(list):
    """The skips met while reading metadata that is read once and reused every epoch
    (a source held in memory, a cv or in-order plan, a shard index's start-up checks):
    the loader counts them in its first epoch as they happen and adds them again to
    ``skip_report`` at the start of each later epoch, so that every epoch's ledger counts
    them, as it counts the skips of a source read again each epoch."""

    def __init__(self, report: Any) -> None:
        super().__init__()
        self.report = report
        self._depth = 0

    @contextmanager
    def reading(self) -> Iterator[None]:
        """Within: what is read is read once (its skips are kept here too; nests)."""
        before = len(self.report)
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
            if not self._depth:
                self.extend(list(self.report)[before:])


@dataclass
class EpochLedger:
    """One rank's account of one epoch (utterance counts; see the module docstring)."""

    epoch: int
    rank: int
    world_size: int
    mode: str
    split: str = "train"
    steps: int = 0
    trained: int = 0
    skipped: int = 0
    filtered: int = 0
    left_over: int = 0

    @property
    def total(self) -> int:
        """All utterances of the epoch accounted for on this rank."""
        return self.trained + self.skipped + self.filtered + self.left_over

    def line(self) -> str:
        """The one log line."""
        done = VERBS.get(self.split, "trained")
        return (f"{self.split} epoch {self.epoch} rank {self.rank}/{self.world_size} "
                f"({self.mode}): "
                f"{self.total} utterances = {self.trained} {done} in {self.steps} steps "
                f"+ {self.skipped} skipped + {self.filtered} filtered "
                f"+ {self.left_over} left over")

    def as_dict(self) -> Dict[str, Any]:
        out = asdict(self)
        out["total"] = self.total
        return out


def log_ledger(ledger: EpochLedger) -> None:
    """Log the ledger's line at INFO, or WARNING when something was left over."""
    level = logging.WARNING if ledger.left_over else logging.INFO
    extra = (" (left over: read but not trained, because every rank stopped at the "
             "same step; set lhotse_conf.equal_steps: false under a loop that joins "
             "uneven ranks)" if ledger.left_over else "")
    logger.log(level, "%s%s", ledger.line(), extra)
