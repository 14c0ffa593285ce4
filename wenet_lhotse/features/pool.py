"""The process pool that runs the per-cut recipe (:class:`~.pipeline.CutPipeline`)
for :class:`~.strategy.PooledFeatures`, so one batch uses several cores even when the
DataLoader has a single worker (or none).

:class:`WorkerPool` runs on the package's one pool,
:class:`~wenet_lhotse.io.pool.ProcessPool`, which may be started inside a daemonic
DataLoader worker and whose workers end with the process that started them whatever
thread started them (a lifeline pipe; see :mod:`wenet_lhotse.io.pool`), so a SIGKILLed
parent leaves no orphan behind. ``close()``, garbage collection and interpreter exit
shut it down (``multiprocessing.util.Finalize``, which also runs in multiprocessing
children where ``atexit`` does not). The pool is created lazily, in the process that
first calls :meth:`~.strategy.PooledFeatures.__call__` (a pool inherited through
``fork`` is dropped, never used).

Why not Lhotse's ``OnTheFlyFeatures``: it extracts in the calling process; the
per-cut recipe here (speed, resample, fbank, spec_*) is WeNet's, run on several cores.

Results do not depend on the pool size or on which worker gets which cut: all
randomness of a cut (speed factor, dither noise, masks) comes from generators seeded by
``blake2b(seed, epoch, cut.id)``.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
from concurrent.futures import BrokenExecutor, Future
from typing import Any, Dict, List, Optional, Sequence

import torch

from wenet_lhotse.errors import WenetDataError
from wenet_lhotse.features.pipeline import CutPipeline
from wenet_lhotse.io.pool import ProcessPool

logger = logging.getLogger(__name__)

_PIPELINE: Optional[CutPipeline] = None  # in a worker: the recipe it runs


def _init_worker(pipeline: CutPipeline) -> None:
    global _PIPELINE
    _PIPELINE = pipeline
    torch.set_num_threads(1)


def _run_cut(index: int, cut: Any, seed: int, augment: bool) -> tuple:
    """Worker side: ``("ok", index, payload)`` or ``("err", index, WenetDataError)``."""
    assert _PIPELINE is not None
    try:
        return ("ok", index, _PIPELINE.process(cut, seed, augment))
    except WenetDataError as err:
        return ("err", index, err)
    except Exception as err:  # noqa: BLE001 -- report anything, keep serving
        return ("err", index, WenetDataError(
            f"cut {_cut_id(cut)!r}: {type(err).__name__}: {err}",
            f"cut {_cut_id(cut)!r}", kind="worker"))


def _close(pool: ProcessPool) -> None:
    pool.close()


class WorkerPool:
    """``num_workers`` processes that run :meth:`CutPipeline.process` on cuts."""

    def __init__(self, pipeline: CutPipeline, num_workers: int,
                 start_method: Optional[str] = None) -> None:
        if num_workers < 1:
            raise ValueError("WorkerPool needs num_workers >= 1")
        if start_method is None:
            start_method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
        self.owner_pid = os.getpid()
        self._pool = ProcessPool(num_workers, _init_worker, (pipeline,), start_method)
        self._finalizer = mp.util.Finalize(self, _close, args=(self._pool,), exitpriority=10)
        logger.debug("feature pool of %d workers (%s)", num_workers, start_method)

    @property
    def pids(self) -> List[int]:
        return self._pool.pids

    @property
    def alive(self) -> bool:
        """False once closed, or once a worker ended between two batches: then no cut
        was in flight (nothing lost), so the pool is closed with a warning naming the
        worker and the caller starts a fresh one. A worker that dies during
        :meth:`run` is an error instead (its cut was not processed)."""
        if not self._finalizer.still_active():
            return False
        ended = self._pool.ended_workers()
        if not ended and not self._pool.broken:
            return True
        pid, code = ended[0] if ended else ("?", None)
        logger.warning("feature worker %s ended between batches (%s); no cut was in "
                       "flight; starting a fresh pool", pid,
                       f"signal {-code}" if code and code < 0 else f"exit code {code}")
        self.close()
        return False

    def run(self, tasks: Sequence[tuple]) -> List[tuple]:
        """Run ``(index, cut, seed, augment)`` tasks; replies in task order.

        Tasks go out longest audio first, so no worker is left with a long cut at the
        end of a batch. A worker that dies breaks the pool (closed) and raises
        ``RuntimeError`` naming a cut it left unfinished; any exception here (e.g.
        KeyboardInterrupt) also closes the pool, so no stale work runs on.
        """
        futures: Dict[int, Future] = {}
        try:
            for i in sorted(range(len(tasks)), key=lambda i: -_task_size(tasks[i])):
                futures[i] = self._pool.submit(_run_cut, *tasks[i])
            replies = []
            for i in range(len(tasks)):
                ended = futures[i].exception()  # returned: a worker's SIGTERM, not ours
                if isinstance(ended, SystemExit):
                    raise BrokenExecutor(f"a worker was ended ({ended!r})")
                replies.append(futures[i].result())
            return replies
        except BrokenExecutor as err:  # BrokenProcessPool: a worker died
            self.close()
            lost = [i for i in range(len(tasks)) if i not in futures
                    or not _succeeded(futures[i])]
            cut = _cut_id(tasks[lost[0]][1]) if lost else "?"
            raise RuntimeError(f"a feature worker died; cut {cut!r} (1 of {len(lost)} "
                               f"unfinished) was not processed: {err}") from err
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Stop the workers (idempotent)."""
        self._finalizer()


def _succeeded(fut: Future) -> bool:
    return fut.done() and not fut.cancelled() and fut.exception() is None


def _task_size(task: tuple) -> float:
    """Audio duration (seconds) of a task's cut, for longest-first scheduling."""
    cut = task[1]
    duration = cut.get("duration") if isinstance(cut, dict) else getattr(cut, "duration", 0.0)
    return float(duration or 0.0)


def _cut_id(cut: Any) -> str:
    return str(cut.get("id") if isinstance(cut, dict) else getattr(cut, "id", "?"))
