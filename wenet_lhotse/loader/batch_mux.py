"""Mixing by batch: draw the source of each batch, then take that source's next batch.

:class:`BatchMuxSampler` holds one resumable sampler per source (speech:
:class:`~.sampler.ResumableBucketingSampler` over that source alone; text:
:class:`~.text_sampler.TextBatchSampler`) and, for every step, draws a source with
``random.Random(seed + epoch).choices`` by weight among the sources not yet exhausted,
then emits that source's next batch. So

* every batch holds one kind of item (speech with transcripts, speech without, text,
  text pairs) from one source, batched by that source's own rule (WeNet's ``batch_conf``
  for speech, ``max_tokens_in_batch`` for text);
* the share of each source among batches follows the weights from the first batch, as
  long as the sources last, whatever the bucketing buffers hold. (Mixing by cut --
  ``CutSet.mux`` before one bucketing sampler -- gives the weights among the cuts
  *read*; when the corpus fits in the buffer the sampler then picks buckets, not
  sources, and the shares among batches come out at the data's shares: 0.62-0.76 for
  3:1 measured in issue 22.) Weights are per batch, not per cut or per second;
* an epoch ends when every source not set to ``repeat`` is exhausted: each such
  source's items exactly once. A ``repeat`` source starts its next pass when exhausted
  (its own epoch counter advances: a new shuffle); with only repeating sources,
  ``steps_per_epoch`` ends the epoch;
* equal steps on every rank: the draws use the same seed on every rank and each
  sub-sampler gives every rank the same number of batches per pass (its own rounds);
* exact resume: the state is the draw RNG after the consumed batches, plus each
  sub-sampler's own state at its share of them (the last
  ``history`` emitted batches are kept, for DataLoader prefetch).

Different from Lhotse: Lhotse mixes samplers with ``RoundRobinSampler`` /
``WeightedSampler`` without resumable state or equal steps; ours has both.
"""

from __future__ import annotations

import random
from collections import deque
from typing import Any, Deque, Dict, List, Optional, Sequence, Tuple

from wenet_lhotse.loader.epochs import EpochAdvance
from wenet_lhotse.loader.mux import tuplify


class BatchMuxSampler(EpochAdvance):
    """Per-batch weighted choice among resumable samplers (see the module docstring).

    :param samplers: one per source, each with ``iter()``/``next()``, ``epoch``,
        ``state_dict(consumed)`` and ``load_state_dict``.
    :param weights: per source, > 0.
    :param names: per source, for statistics.
    :param repeat: per source: start a new pass when exhausted instead of leaving the mix.
    :param steps_per_epoch: end each epoch after this many batches (needed when every
        source repeats).
    :param history: emitted batches whose state is kept (>= DataLoader prefetch depth).
    """

    resumable = True

    def __init__(self, samplers: Sequence[Any], weights: Sequence[float], *,
                 names: Optional[Sequence[str]] = None, repeat: Optional[Sequence[bool]] = None,
                 seed: int = 0, steps_per_epoch: Optional[int] = None,
                 history: int = 64) -> None:
        self.samplers = list(samplers)
        n = len(self.samplers)
        self.weights = [float(w) for w in weights]
        if len(self.weights) != n or not all(w > 0 for w in self.weights):
            raise ValueError("one weight > 0 per source is needed")
        self.names = list(names) if names is not None else [str(i) for i in range(n)]
        self.repeat = list(repeat) if repeat is not None else [False] * n
        if all(self.repeat) and steps_per_epoch is None:
            raise ValueError("every source repeats: set lhotse_conf.steps_per_epoch, or the "
                             "epoch never ends")
        self.seed = seed
        self.steps_per_epoch = steps_per_epoch
        self._init_epochs()
        self._history: Deque[Tuple[int, Dict[str, Any]]] = deque(maxlen=history + 1)
        self._ends: List[Dict[int, Dict[str, Any]]] = [{} for _ in range(n)]
        self._end_depth = history + 1
        self._loaded_end: Dict[int, Dict[str, Any]] = {}
        self.emitted = 0
        #: batches drawn from each source this epoch (statistics)
        self.counts = [0] * n

    # -- epochs

    def set_epoch(self, epoch: int) -> None:
        super().set_epoch(epoch)
        for s in self.samplers:
            s.set_epoch(epoch)

    def __iter__(self) -> BatchMuxSampler:
        if not self._start_iter():  # a restored state: resume it
            return self
        self.rng = random.Random(self.seed + self.epoch)
        n = len(self.samplers)
        self.exhausted = [False] * n
        self.passes = [0] * n
        self.pass_counts = [0] * n
        self.counts = [0] * n
        self.emitted = 0
        self._its: List[Any] = [iter(s) for s in self.samplers]
        self._ends = [{} for _ in range(n)]
        self._loaded_end = {}
        self._history.clear()
        self._history.append((0, self._mark()))
        return self

    def _mark(self) -> Dict[str, Any]:
        return {"rng": self.rng.getstate(), "exhausted": list(self.exhausted),
                "passes": list(self.passes), "pass_counts": list(self.pass_counts),
                "counts": list(self.counts)}

    # -- batches

    def _done(self) -> bool:
        if self.steps_per_epoch is not None and self.emitted >= self.steps_per_epoch:
            return True
        finite = [i for i, r in enumerate(self.repeat) if not r]
        return bool(finite) and all(self.exhausted[i] for i in finite)

    def __next__(self) -> Any:
        while not self._done():
            active = [i for i, ex in enumerate(self.exhausted) if not ex]
            if not active:
                break
            idx = self.rng.choices(active, weights=[self.weights[i] for i in active], k=1)[0]
            try:
                batch = next(self._its[idx])
            except StopIteration:
                if self.pass_counts[idx] == 0:  # an empty pass: the source has nothing
                    self.exhausted[idx] = True
                    continue
                self._end_pass(idx)
                if not self.repeat[idx]:
                    self.exhausted[idx] = True
                    continue
                self.passes[idx] += 1
                self.pass_counts[idx] = 0
                self._its[idx] = iter(self.samplers[idx])
                continue
            self.pass_counts[idx] += 1
            self.counts[idx] += 1
            self.emitted += 1
            self.last_source = idx
            self._history.append((self.emitted, self._mark()))
            return batch
        raise StopIteration

    def _end_pass(self, idx: int) -> None:
        """Keep the states a resume may need from the pass that just ended."""
        s, n = self.samplers[idx], self.pass_counts[idx]
        ends: Dict[int, Dict[str, Any]] = {}
        loaded = self._loaded_end.pop(idx, None)
        if loaded is not None:  # restored at the end of this pass: the state it came with
            self._ends[idx] = {"pass": self.passes[idx], "states": {n: loaded}, "n": n}
            return
        for c in range(max(0, n - self._end_depth), n + 1):
            try:
                ends[c] = s.state_dict(c)
            except ValueError:  # older than the sampler's own snapshots
                continue
        self._ends[idx] = {"pass": self.passes[idx], "states": ends, "n": n}

    # -- state

    def state_dict(self, consumed: Optional[int] = None) -> Dict[str, Any]:
        """The state after ``consumed`` batches of this epoch (default: all emitted)."""
        consumed = self.emitted if consumed is None else consumed
        base = {"kind": "batch_mux", "seed": self.seed, "weights": self.weights}
        if not self._started:
            return {**base, "epoch": self.epoch, "consumed": 0, "mark": None, "subs": None}
        marks = dict(self._history)
        mark = marks.get(consumed)
        if mark is None:
            raise ValueError(f"no mixing state for batch {consumed} of epoch {self.epoch} "
                             f"(have {sorted(marks)}); raise snapshot_depth above the "
                             f"DataLoader's prefetch depth")
        subs, ended = [], []
        for i, s in enumerate(self.samplers):
            c, ends = mark["pass_counts"][i], self._ends[i]
            if not (ends and ends["pass"] == mark["passes"][i]):
                subs.append(s.state_dict(c))  # that pass is still running
                ended.append(False)
                continue
            if c not in ends["states"]:
                raise ValueError(f"source {self.names[i]}: its state at batch {consumed} "
                                 f"is no longer kept")
            subs.append(ends["states"][c])
            # every batch of the pass consumed, its end not yet met at that batch: the
            # next draw of it meets the end again (same RNG draws as the first time)
            ended.append(c == ends["n"] and not mark["exhausted"][i])
        return {**base, "epoch": self.epoch, "consumed": consumed, "mark": mark, "subs": subs,
                "ended": ended}

    def load_state_dict(self, sd: Dict[str, Any]) -> None:
        if sd.get("kind") != "batch_mux":
            raise ValueError("not a mixed-by-batch sampler state (the sources changed?)")
        if sd.get("seed") != self.seed or len(sd.get("subs") or self.samplers) != len(
                self.samplers):
            raise ValueError("the sampler state was saved with another seed or other sources")
        mark = sd["mark"]
        if mark is None:  # saved before its epoch began: iter() starts that epoch
            self._restored_at(sd["epoch"], resume=False)
            return
        for s, sub in zip(self.samplers, sd["subs"]):  # refused before any is restored
            check = getattr(s, "check_state", None)
            if check is not None:
                check(sub)
        self.epoch = int(sd["epoch"])
        for s, sub in zip(self.samplers, sd["subs"]):
            s.load_state_dict(sub)
        self.rng = random.Random()
        self.rng.setstate(tuplify(mark["rng"]))
        self.exhausted = list(mark["exhausted"])
        n = len(self.samplers)
        self.passes = [0] * n
        self.pass_counts = list(mark["pass_counts"])
        self.counts = list(mark["counts"])
        self.emitted = int(sd["consumed"])
        ended = sd.get("ended") or [False] * n
        self._loaded_end = {i: sub for i, (sub, end) in enumerate(zip(sd["subs"], ended)) if end}
        self._its = [None if ex else iter(()) if end else iter(s)
                     for s, ex, end in zip(self.samplers, self.exhausted, ended)]
        self._ends = [{} for _ in range(n)]
        self._history.clear()
        self._history.append((self.emitted, self._mark()))
        self._restored_at(self.epoch)
