"""A progress line during a training epoch: batches done / planned, audio hours, the
share of time spent waiting for data, and an ETA.

WeNet's executor logs its loss every ``log_interval`` steps but never how far an epoch
has come or when it will end. The training loader (split ``train``, rank 0 only: the
ranks move in step) logs one INFO line (logger ``wenet_lhotse.loader.progress``) every
``lhotse_conf.progress_every`` batches (default 100; 0: off), after the first batch (the
time to it, and a first ETA), and at the latest :data:`MAX_SILENCE_S` seconds after the
previous line once a batch is done::

    epoch 0: batch 120/300 (40%), 1200 utts, 1.52 h audio, data wait 3% of 95 s, ETA 2 min 23 s

What the loader knows of the epoch's length, by mode:

* a planned epoch (cv plans, WeNet's deterministic order): the number of batches, exact;
* map-style (raw lists, cuts, Shar, indexed shards): the utterances of the epoch (its
  sources' lengths, this rank's ``1/world_size`` share), so the batches are estimated
  from the mean batch so far (``~300``) and so is the ETA;
* streamed (tar shards without an index): nothing until the epoch ends: the line gives
  what is done and no ETA.

Audio hours are the batches' feature frames (``feats_lengths``) times the 10 ms frame
shift of WeNet's features (after speed perturbation); data wait is the time the training
loop spent inside the loader's ``next()``, measured by :class:`~.distributed.DataWaitMeter`.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any, Callable, Iterator, Optional, Tuple

from wenet_lhotse.loader.distributed import DataWaitMeter

logger = logging.getLogger(__name__)

#: seconds after which a line is logged anyway (once a batch is done), however slow
MAX_SILENCE_S = 60.0

#: feature frame shift in seconds (WeNet's ``frame_shift: 10`` ms for fbank, mfcc, Whisper)
FRAME_SHIFT_S = 0.01


def epoch_plan(loader: Any) -> Tuple[Optional[int], Optional[int]]:
    """``(batches, utterances)`` this rank is planned to train this epoch, each ``None``
    when unknown: batches from a sampler that has a length (a planned epoch),
    utterances from the map-style sampler's sources (their lengths over the ranks)."""
    sampler = getattr(loader, "sampler", None)
    inner = getattr(sampler, "sampler", sampler)
    for s in (inner, sampler):
        try:
            n = len(s)  # type: ignore[arg-type]
        except (TypeError, NotImplementedError, AttributeError):
            continue
        if isinstance(n, int) and n > 0 and getattr(loader, "mode", "") == "map":
            return n, None
    mux = getattr(inner, "mux", None)
    if mux is None:
        return None, None
    try:
        total = sum(len(s.reader) for s in mux.streams)
    except (TypeError, NotImplementedError, AttributeError):
        return None, None
    from wenet_lhotse.loader.distributed import world_info

    ws = world_info()[0] if getattr(loader, "partitioned", True) else 1
    return None, max(1, total // ws)


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds >= 3600:
        return f"{seconds // 3600} h {seconds % 3600 // 60} min"
    if seconds >= 60:
        return f"{seconds // 60} min {seconds % 60} s"
    return f"{seconds} s"


class EpochProgress:
    """Counts one epoch's batches as the training loop takes them and logs the line.

    :param loader: the training loader (for :func:`epoch_plan`, its ``epoch``).
    :param every: a line every this many batches (0: none).
    :param clock: seconds (monotonic); for tests.
    """

    def __init__(self, loader: Any, every: int, clock: Callable[[], float] = time.monotonic,
                 ) -> None:
        self.loader = loader
        self.every = every
        self.clock = clock
        self.meter = DataWaitMeter(clock)  # batches taken, seconds waited inside next()
        self.utts = 0
        self.audio_s = 0.0
        self._plan: Optional[Tuple[Optional[int], Optional[int]]] = None

    @property
    def batches(self) -> int:
        return self.meter.batches

    @property
    def wait_s(self) -> float:
        return self.meter.wait

    def wrap(self, it: Iterator[Any]) -> Iterator[Any]:
        """``it``, timed and counted; logs the progress line as batches are taken."""
        start = last = self.clock()
        for batch in self.meter.wrap(it):
            now = self.clock()
            self._add(batch)
            if self.batches == 1 or self.batches % self.every == 0 or \
                    now - last >= MAX_SILENCE_S:
                last = now
                logger.info("%s", self.line(now - start))
            yield batch

    def _add(self, batch: Any) -> None:
        if not isinstance(batch, dict):
            return
        keys = batch.get("keys")
        self.utts += len(keys) if isinstance(keys, (list, tuple)) else 0
        lengths = batch.get("feats_lengths")
        if lengths is not None:
            self.audio_s += float(lengths.sum()) * FRAME_SHIFT_S

    def line(self, elapsed: float) -> str:
        """The progress line after ``elapsed`` seconds of this epoch."""
        if self._plan is None:  # after the first batch: the sampler has started its epoch
            self._plan = epoch_plan(self.loader)
        batches, utts = self._plan
        approx = ""
        if batches is None and utts and self.utts:
            batches = max(self.batches, math.ceil(utts * self.batches / self.utts))
            approx = "~"
        done = f"batch {self.batches}"
        eta = ""
        if batches:
            done += f"/{approx}{batches} ({100 * self.batches // batches}%)"
            left = max(0, batches - self.batches) * elapsed / self.batches
            eta = f", ETA {_duration(left)}"
        else:
            done += " (streamed: the epoch's length is known at its end)"
        wait = 100 * self.wait_s / elapsed if elapsed > 0 else 0.0
        return (f"epoch {getattr(self.loader, 'epoch', 0)}: {done}, {self.utts} utts, "
                f"{self.audio_s / 3600:.2f} h audio, data wait {wait:.0f}% of "
                f"{_duration(elapsed)}{eta}")


def with_progress(loader: Any, it: Iterator[Any]) -> Iterator[Any]:
    """``it`` (one epoch of ``loader``) with the progress line, on rank 0 of a training
    loader whose ``progress_every`` is set; else ``it`` itself."""
    every = int(getattr(loader, "progress_every", 0) or 0)
    if every <= 0 or getattr(loader, "split", "train") != "train":
        return it
    from wenet_lhotse.loader.distributed import world_info

    if world_info()[1] != 0:
        return it
    return EpochProgress(loader, every).wrap(it)
