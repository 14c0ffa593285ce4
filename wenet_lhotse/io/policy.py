"""How inputs are read, in one object: :class:`ReadPolicy`.

Every reader (raw lists, tar shards, manifests, Shar, Parquet, text sources, remote
audio) takes one ``policy`` instead of loose flags: whether the first bad item raises
(``strict``, WeNet's behaviour) or is skipped and recorded (``skip_report``), whether
shell commands from the data may run (``allow_pipe``), which URL protocols may be read
(``url_protocols``), the size cap of one tar member (``max_member_bytes``), the length
cap of one line of a list, manifest or text source (``max_line_bytes``) and the time
limits and retries of network reads (``limits``). It is the one way to pass these
settings: no reader takes them as separate keywords.

A policy is picklable: it travels to DataLoader workers and pool processes with the
reader; its ``skip_report`` is then the worker's copy, forwarded back with the batches
(:data:`~wenet_lhotse.errors.BATCH_SKIPS_KEY`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, FrozenSet, Optional

from wenet_lhotse.errors import SkipReport, WenetDataError
from wenet_lhotse.io.access import PIPE_REFUSED, lend_url_protocols, url_problem
from wenet_lhotse.io.lines import bounded_lines, max_line_bytes
from wenet_lhotse.io.read_limits import ReadLimits


@dataclass
class ReadPolicy:
    """What a reader does with bad input and what it may open.

    :param strict: raise on the first bad item (WeNet's behaviour); otherwise skip it
        and record it in ``skip_report``.
    :param skip_report: where skips are recorded (one is made when not given).
    :param allow_pipe: run ``pipe:`` inputs and ``command`` audio sources (shell
        commands from the data); refused otherwise.
    :param url_protocols: URL protocols read besides the defaults of
        :data:`~wenet_lhotse.io.access.DEFAULT_URL_PROTOCOLS` (``None``: only those and
        ``$WENET_LHOTSE_URL_PROTOCOLS``).
    :param max_member_bytes: largest tar member read, in bytes (``None``:
        ``$WENET_LHOTSE_MAX_MEMBER_BYTES`` or 1 GiB).
    :param max_line_bytes: longest line of a list, manifest or text source, in bytes
        (``None``: ``$WENET_LHOTSE_MAX_LINE_BYTES`` or 16 MiB; :mod:`~wenet_lhotse.io.lines`).
    :param limits: time limits (seconds) and retries of network reads (``None``:
        :class:`~wenet_lhotse.io.read_limits.ReadLimits` from the environment, made
        where the read happens: :meth:`read_limits`).

    >>> ReadPolicy().strict, ReadPolicy(strict=False).allow_pipe
    (True, False)
    >>> p = ReadPolicy(strict=False)
    >>> p.handle(WenetDataError("bad json", "data.list", line=3)); len(p.skip_report)
    1
    """

    strict: bool = True
    skip_report: Optional[SkipReport] = None
    allow_pipe: bool = False
    url_protocols: Optional[FrozenSet[str]] = None
    max_member_bytes: Optional[int] = None
    max_line_bytes: Optional[int] = None
    limits: Optional[ReadLimits] = None

    def __post_init__(self) -> None:
        if self.skip_report is None:
            self.skip_report = SkipReport()
        if self.url_protocols is not None:
            self.url_protocols = frozenset(p.lower() for p in self.url_protocols)

    def replace(self, **changes: Any) -> ReadPolicy:
        """A copy with ``changes`` (the skip report is shared unless replaced)."""
        return dataclasses.replace(self, **changes)

    def check_pipe(self, source: str, *, line: Optional[int] = None, what: str = "") -> None:
        """The ONE decision whether the data may run a shell command (a ``pipe:`` input,
        a ``command`` audio source): nothing when the policy opts in, else a one-line
        :class:`WenetDataError` (kind ``"refused"``) naming ``source`` (and ``line``),
        ``what`` the data asked for before :data:`~wenet_lhotse.io.access.PIPE_REFUSED`.
        Raised, not handled: the caller decides whether the refusal is one skipped item
        (:meth:`handle`) or stops the read."""
        if not self.allow_pipe:
            msg = f"{what}: {PIPE_REFUSED}" if what else PIPE_REFUSED
            raise WenetDataError(msg, source, line=line, kind="refused")

    def without_pipe(self) -> ReadPolicy:
        """A copy that refuses every command from the data (the skip report shared)."""
        return self.replace(allow_pipe=False)

    def read_limits(self) -> ReadLimits:
        """``limits``, else :class:`ReadLimits` from the environment (read now)."""
        return self.limits if self.limits is not None else ReadLimits()

    def line_limit(self) -> int:
        """``max_line_bytes``, else ``$WENET_LHOTSE_MAX_LINE_BYTES`` (read now), else
        16 MiB."""
        return max_line_bytes(self.max_line_bytes)

    def lines(self, f, source: str, start: int = 1):
        """``(line number, line)`` of ``f`` within :meth:`line_limit`; a longer line is
        handled like any bad item (raised when strict, else skipped and recorded)."""
        return bounded_lines(f, source, self.line_limit(),  # strict: raised at once
                             None if self.strict else self.handle, start=start)

    def url_problem(self, url: str) -> Optional[str]:
        """Why ``url`` is not read under this policy (its ``url_protocols`` added to
        the defaults and ``$WENET_LHOTSE_URL_PROTOCOLS``), or None."""
        return url_problem(url, self.url_protocols)

    def lend_to_lhotse(self) -> None:
        """Readers whose cuts carry audio URLs that Lhotse opens later, without a
        policy (raw lists, manifests): let it open this policy's ``url_protocols``."""
        if self.url_protocols:
            lend_url_protocols(self.url_protocols)

    def handle(self, err: WenetDataError) -> None:
        """Raise ``err`` when strict; otherwise record it in the skip report."""
        assert self.skip_report is not None
        self.skip_report.handle(err, self.strict)


def _view(name: str) -> Any:
    """A read-only property giving ``self.policy.<name>``."""

    def get(self: Any) -> Any:
        return getattr(self.policy, name)

    return property(get, doc=f"The policy's ``{name}``.")


class PolicyHolder:
    """A reader that keeps its :class:`ReadPolicy` in ``self.policy``; ``strict`` and
    ``skip_report`` read the policy's (change the policy to change them:
    :meth:`ReadPolicy.replace`); whether commands run is asked of the policy
    (:meth:`ReadPolicy.check_pipe`)."""

    policy: ReadPolicy
    strict: bool = _view("strict")
    skip_report: SkipReport = _view("skip_report")
