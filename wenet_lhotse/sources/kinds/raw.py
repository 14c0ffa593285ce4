"""``raw``: a WeNet ``data.list`` (JSON lines ``{"key", "wav", "txt"}``), read by
:func:`~wenet_lhotse.formats.raw_list.read_raw_list`.

Detected by a first JSON line with ``"key"``; it is also the fallback for any other
JSON first line (a bad first line is then named by the reader) and for an empty file.
Map-style loading holds its cuts in memory (durations from the audio headers, probed
once with ``lhotse_conf.probe_cache``).
"""

from __future__ import annotations

import json
from typing import Any, Callable, Dict, Iterator, Optional, Sequence, Tuple

from lhotse import CutSet
from lhotse.utils import Pathlike

from wenet_lhotse.errors import WenetDataError
from wenet_lhotse.formats.raw_list import read_raw_list
from wenet_lhotse.io.lines import bounded_lines
from wenet_lhotse.io.policy import ReadPolicy
from wenet_lhotse.sources.kinds.base import InputKind, PositionedReaders
from wenet_lhotse.sources.kinds.sniff import MAYBE, NO, SURE, FirstLine
from wenet_lhotse.sources.units import DEFAULT_UNIT_CUTS, UnitCut, WorkUnit, slices


def _ignore(err: WenetDataError) -> None:
    """A line too long to hold names no key (the reader reported it)."""


class _LineFinder:
    """Finds the line of a key in a raw list; the index is built only on first use."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._index: Optional[Dict[str, int]] = None

    def __call__(self, key: str) -> Optional[int]:
        if self._index is None:
            self._index = {}
            with open(self.path, encoding="utf-8", errors="replace") as f:
                for no, line in bounded_lines(f, self.path, on_too_long=_ignore):
                    try:
                        k = json.loads(line).get("key")
                    except (json.JSONDecodeError, AttributeError, RecursionError):
                        continue
                    self._index.setdefault(k, no)
        return self._index.get(key)


class RawKind(InputKind):
    name = "raw"
    description = "WeNet raw data.list (JSON lines with key, wav, txt)"
    wenet = True
    reader = staticmethod(read_raw_list)

    def sniff(self, first: FirstLine) -> int:
        if not first.line:
            return MAYBE  # an empty list
        if not first.is_json:
            return NO
        record = first.record
        return SURE if record is not None and "key" in record else MAYBE

    def open(self, paths: Sequence[str], policy: ReadPolicy, *, wav_root: Any = None,
             **_: Any) -> CutSet:
        return read_raw_list(paths, wav_root=wav_root, policy=policy)

    def map_reader(self, spec: Any, readers: PositionedReaders) -> Any:
        if not readers.probe_cache:
            return super().map_reader(spec, readers)
        from wenet_lhotse.sources.probe_cache import probed_raw_list

        policy, cache = readers.policy, readers.probe_cache
        probed = probed_raw_list(spec.paths, policy=policy,
                                 cache_dir=None if cache is True else cache)
        # the cache is a manifest: metadata only for training (a fraction of the memory)
        return readers.in_memory(list(probed.cuts(policy=policy,
                                                  metadata_only=readers.light)))

    # -- the tools' work units (sources/units.py) -------------------------------------------
    unit_name = "list"

    def work_units(self, path: str, policy: ReadPolicy, *, audio: bool = True,
                   chunk_size: int = DEFAULT_UNIT_CUTS, wav_root: Optional[Pathlike] = None,
                   mapper: Optional[Callable] = None
                   ) -> Tuple[Iterator[WorkUnit], Optional[int]]:
        """Slices of the list's cuts, read here (the reader checks repeated keys over the
        whole list); with a ``mapper`` the lines' audio headers are probed in parallel."""
        if mapper is not None:
            from wenet_lhotse.sources.raw_lines import parse_raw_lines

            items = (UnitCut(c, p, None, no) for c, p, no in parse_raw_lines(
                [path], policy, wav_root=wav_root, mapper=mapper))
        else:
            items = (UnitCut(c, path) for c in self.open([path], policy, wav_root=wav_root))
        return slices(items, self.name, path, chunk_size), None

    def cut_label(self, cut: Any) -> str:
        return f"{cut.id!r} ({cut.recording.sources[0].source})"

    def line_finder(self, path: str) -> Callable[[str], Optional[int]]:
        return _LineFinder(path)

    def prepare_index(self, path: str, cache_dir: Optional[str] = None) -> str:
        from wenet_lhotse.sources.probe_cache import probed_raw_list

        probed = probed_raw_list(path, cache_dir=cache_dir)
        return (f"{path}: raw list, audio headers probed and cached in {probed.manifest} "
                "(set lhotse_conf.probe_cache to use it)")


KIND = RawKind()
