"""Errors that name where bad data lives, the report of skipped items, and the
one-line summary of a decoder's error.

Every reader has two modes, chosen by ``strict`` and applied in one place,
:meth:`SkipReport.handle`:

* strict (default): the first bad item raises :class:`WenetDataError`, whose
  message names the list file and 1-based line number, or the tar and member;
* fault-tolerant: the bad item is logged, recorded in a :class:`SkipReport`
  and skipped; valid items are never dropped.

This module is the bottom of the package: it imports nothing from it.
"""

from __future__ import annotations

import io
import logging
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterator, List, NamedTuple, Optional, Tuple

logger = logging.getLogger(__name__)

#: Batch-dict key under which a dataset running in a DataLoader worker forwards the
#: items it skipped since its previous batch (a list of :class:`SkippedItem`); our
#: loader pops it into ``loader.skip_report``, so no skip stays hidden in a worker.
BATCH_SKIPS_KEY = "skipped"


def format_location(source: str, line: Optional[int] = None, member: Optional[str] = None) -> str:
    """``data.list:12`` for a list line, ``shard.tar[key.wav]`` for a tar member."""
    loc = str(source)
    if line is not None:
        loc += f":{line}"
    if member is not None:
        loc += f"[{member}]"
    return loc


class WenetDataError(ValueError):
    """Bad input data. ``str(err)`` starts with the location, e.g. ``data.list:12: ...``.

    :param message: what is wrong.
    :param source: the list file, tar path/URL or audio file concerned.
    :param line: 1-based line number within ``source`` (list files).
    :param member: tar member name (shards, Shar).
    :param kind: a short machine-readable category (``"json"``, ``"missing_field"``,
        ``"missing_audio"``, ``"bad_audio"``, ``"encoding"``, ``"truncated"``,
        ``"unpaired"``, ``"duplicate"``, ...), used in skip counts.
    """

    def __init__(
        self,
        message: str,
        source: str,
        line: Optional[int] = None,
        member: Optional[str] = None,
        kind: str = "invalid",
    ) -> None:
        self.message = message
        self.source = str(source)
        self.line = line
        self.member = member
        self.kind = kind
        super().__init__(f"{format_location(self.source, line, member)}: {message}")

    def __reduce__(self):
        # Keep the structured fields when the error crosses a process boundary.
        return (
            self.__class__,
            (self.message, self.source, self.line, self.member, self.kind),
        )


class WenetConfigError(WenetDataError):
    """A bad value or unknown key in a WeNet yaml. ``str(err)`` is one line: the yaml
    file when known, the dotted key, then what is wrong (``kind`` is ``"config"``).

    :param key: the dotted yaml key, e.g. ``dataset_conf.batch_conf.batch_size``.
    :param message: what is wrong with it.
    :param source: the yaml file, when known.
    """

    def __init__(self, key: str, message: str, source: Optional[str] = None) -> None:
        self.key = key
        self.config_source = source
        self.message = message
        self.source = str(source) if source else ""
        self.line = None
        self.member = None
        self.kind = "config"
        ValueError.__init__(self, f"{source}: {key}: {message}" if source else f"{key}: {message}")

    def __reduce__(self):
        return (self.__class__, (self.key, self.message, self.config_source))


@dataclass(frozen=True)
class SkippedItem:
    """One item a fault-tolerant reader left out, and why."""

    source: str
    line: Optional[int]
    member: Optional[str]
    kind: str
    message: str

    @property
    def location(self) -> str:
        return format_location(self.source, self.line, self.member)

    def __str__(self) -> str:
        return f"{self.location}: {self.message}"

    @classmethod
    def from_error(cls, err: WenetDataError) -> SkippedItem:
        return cls(err.source, err.line, err.member, err.kind, err.message)


@dataclass(frozen=True)
class SkipsOnly:
    """What a DataLoader worker yields, instead of a batch, to forward the items it
    skipped after its last batch (or when it had no batch at all): the loader adds them
    to its ``skip_report`` and does not count it as a step."""

    items: List[SkippedItem]


class WithSkips(NamedTuple):
    """A batch that is not a dict, with the items skipped while making it (a dict
    carries them under :data:`BATCH_SKIPS_KEY`): see :func:`carry_skips`."""

    batch: Any
    skips: List[SkippedItem]


def carry_skips(batch: Any, skips: List[SkippedItem]) -> Any:
    """``batch`` carrying ``skips`` to the loader's process: under
    :data:`BATCH_SKIPS_KEY` in a dict batch, else as a :class:`WithSkips` (a dataset
    may return any batch; its skips are counted all the same)."""
    if not skips:
        return batch
    if isinstance(batch, dict):
        batch.setdefault(BATCH_SKIPS_KEY, []).extend(skips)
        return batch
    return WithSkips(batch, list(skips))


def take_skips(batch: Any) -> Tuple[Any, List[SkippedItem]]:
    """What :func:`carry_skips` made -> ``(the dataset's batch, its skips)``."""
    if isinstance(batch, WithSkips):
        return batch.batch, batch.skips
    if isinstance(batch, dict) and BATCH_SKIPS_KEY in batch:
        return batch, batch.pop(BATCH_SKIPS_KEY)
    return batch, []


class WorkerFailed:
    """What a DataLoader worker returns, instead of a batch, when it meets a
    :class:`WenetDataError`: the loader raises the error itself in the training process.
    (PyTorch re-raises a worker's error as a ``RuntimeError`` carrying the worker's
    traceback in its message when the error's class cannot be rebuilt from one string.)"""

    def __init__(self, error: WenetDataError) -> None:
        self.error = error


@dataclass
class SkipReport:
    """Counts and lists every skipped item. Thread-safe; merge reports from workers
    with :meth:`merge`. Each skip is also logged at WARNING level when recorded,
    unless ``log=False`` (for callers such as ``validate`` that print the list)."""

    items: List[SkippedItem] = field(default_factory=list)
    log: bool = True
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    _taken: int = field(default=0, repr=False, compare=False)  # see take_new()

    def add(self, err: WenetDataError, log: Optional[bool] = None) -> None:
        item = SkippedItem.from_error(err)
        with self._lock:
            self.items.append(item)
        if self.log if log is None else log:
            logger.warning("skipped %s", item)

    def handle(self, err: WenetDataError, strict: bool) -> None:
        """The one "strict or fault-tolerant" decision: raise ``err`` when ``strict``,
        else record (and log) it and let the caller skip the item."""
        if strict:
            raise err
        self.add(err)

    def merge(self, other: SkipReport) -> SkipReport:
        return self.extend(other.items)

    def extend(self, items: List[SkippedItem]) -> SkipReport:
        """Add items recorded (and logged) elsewhere, e.g. in a DataLoader worker."""
        with self._lock:
            self.items.extend(items)
        return self

    def take_new(self) -> List[SkippedItem]:
        """The items added since the previous call (what a worker still has to forward)."""
        with self._lock:
            taken, self._taken = self._taken, len(self.items)
            return self.items[taken:]

    def __len__(self) -> int:
        return len(self.items)

    def __iter__(self) -> Iterator[SkippedItem]:
        return iter(list(self.items))

    def __bool__(self) -> bool:
        # A report is an object that exists even when empty; use len() for counts.
        return True

    def counts(self) -> Counter:
        """Number of skipped items per ``kind``."""
        return Counter(item.kind for item in self.items)

    def summary(self) -> str:
        if not self.items:
            return "no items skipped"
        by_kind = ", ".join(f"{k}: {v}" for k, v in sorted(self.counts().items()))
        return f"{len(self.items)} items skipped ({by_kind})"

    def __getstate__(self):
        return {"items": list(self.items), "log": self.log, "taken": self._taken}

    def __setstate__(self, state):
        self.items = state["items"]
        self.log = state.get("log", True)
        self._taken = state.get("taken", 0)
        self._lock = threading.Lock()


def is_worker_death(err: BaseException) -> bool:
    """True for the ``RuntimeError`` PyTorch raises when a DataLoader worker dies
    (its SIGCHLD handler raises it asynchronously, inside whatever the main process was
    running -- possibly parsing a manifest line). Never a data error."""
    text = str(err)
    return isinstance(err, RuntimeError) and "DataLoader worker" in text and (
        "killed by signal" in text or "exited unexpectedly" in text
        or "is killed" in text)


def reraise_worker_death(err: BaseException) -> None:
    """Re-raise ``err`` when :func:`is_worker_death`: for every ``except Exception`` that
    turns what it catches into a :class:`WenetDataError` (a killed worker was reported
    as a bad manifest line in 2 of 51 strict runs)."""
    if is_worker_death(err):
        raise err


def short_error(err: BaseException, audio=None) -> str:
    """One line saying why audio could not be read, without Lhotse's backend list.

    With ``audio`` (a path, or the encoded bytes), libsndfile is asked for the cause
    first (Lhotse's own message ends with a hint, not the cause). Otherwise the first
    backend's message of Lhotse's ``AudioLoadingError`` is used (``Exception #0 (...):
    <class '...LibsndfileError'>: Error : ...``), else ``Type: first line``.
    """
    text = str(err).strip()
    if audio is not None:
        import soundfile as sf

        try:
            sf.info(io.BytesIO(audio) if isinstance(audio, (bytes, bytearray)) else audio)
        except Exception as e:  # libsndfile's reason, e.g. "Format not recognised."
            return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        lines = [x.strip() for x in text.splitlines() if x.strip()]
        return lines[0] if lines else type(err).__name__
    for line in text.splitlines():
        if line.startswith("Exception #0"):
            return line.rsplit(">: ", 1)[-1].strip() or type(err).__name__
    first = text.splitlines()[0] if text else ""
    return f"{type(err).__name__}: {first}" if first else type(err).__name__
