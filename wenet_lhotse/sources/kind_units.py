"""The work-unit hooks (:mod:`wenet_lhotse.sources.units`) of each input kind.

Until the kinds of :mod:`wenet_lhotse.sources.registry` carry them, each kind's hooks
are one class here, found by :func:`unit_reader`.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

from lhotse.cut import Cut
from lhotse.utils import Pathlike

from wenet_lhotse.errors import WenetDataError
from wenet_lhotse.formats.keyset import KeySet
from wenet_lhotse.io.policy import ReadPolicy
from wenet_lhotse.sources.units import DEFAULT_UNIT_CUTS, UnitCut, UnitReader, WorkUnit, slices

_MANIFEST_INDEX = ("its cuts manifests are the index already (map mode reads them by "
                   "line number); nothing to write")


class _LineFinder:
    """Finds the line of a key in a raw list; the index is built only on first use."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._index: Optional[Dict[str, int]] = None

    def __call__(self, key: str) -> Optional[int]:
        if self._index is None:
            self._index = {}
            with open(self.path, encoding="utf-8", errors="replace") as f:
                for no, line in enumerate(f, 1):
                    try:
                        k = json.loads(line).get("key")
                    except (json.JSONDecodeError, AttributeError, RecursionError):
                        continue
                    self._index.setdefault(k, no)
        return self._index.get(key)


class RawUnits(UnitReader):
    """A raw list: slices of its cuts, read here (the reader checks repeated keys over
    the whole list); with a ``mapper`` the lines' audio headers are probed in parallel."""

    name = "raw"
    unit_name = "list"

    def work_units(self, path: str, policy: ReadPolicy, *, audio: bool = True,
                   chunk_size: int = DEFAULT_UNIT_CUTS, wav_root: Optional[Pathlike] = None,
                   mapper: Optional[Callable] = None
                   ) -> Tuple[Iterator[WorkUnit], Optional[int]]:
        if mapper is not None:
            from wenet_lhotse.sources.raw_lines import parse_raw_lines

            items = (UnitCut(c, p, None, no) for c, p, no in parse_raw_lines(
                [path], policy, wav_root=wav_root, mapper=mapper))
        else:
            from wenet_lhotse.formats.raw_list import read_raw_list

            items = (UnitCut(c, path) for c in read_raw_list(
                [path], wav_root=wav_root, strict=policy.strict,
                skip_report=policy.skip_report))
        return slices(items, self.name, path, chunk_size), None

    def cut_label(self, cut: Cut) -> str:
        return f"{cut.id!r} ({cut.recording.sources[0].source})"

    def line_finder(self, path: str) -> Callable[[str], Optional[int]]:
        return _LineFinder(path)

    def prepare_index(self, path: str, cache_dir: Optional[str] = None) -> str:
        from wenet_lhotse.sources.probe_cache import probed_raw_list

        probed = probed_raw_list(path, cache_dir=cache_dir)
        return (f"{path}: raw list, audio headers probed and cached in {probed.manifest} "
                "(set lhotse_conf.probe_cache to use it)")


class ShardUnits(UnitReader):
    """A shard list: one unit per tar, read in the worker."""

    name = "shard"
    unit_name = "tar"
    keys_repeat_across_units = True
    reads_in_caller = False
    shard_index = True

    def work_units(self, path: str, policy: ReadPolicy, **_: Any
                   ) -> Tuple[Iterator[WorkUnit], Optional[int]]:
        from wenet_lhotse.formats.shard_reader import read_shard_entries

        tars = read_shard_entries([path], strict=policy.strict,
                                  skip_report=policy.skip_report, allow_pipe=policy.allow_pipe)
        return (WorkUnit(self.name, t.url, t) for t in tars), len(tars)

    def read_unit(self, unit: WorkUnit, policy: ReadPolicy, *, audio: bool = True
                  ) -> Iterator[UnitCut]:
        from wenet_lhotse.formats.shard_reader import read_one_tar

        for cut in read_one_tar(unit.payload, strict=policy.strict,
                                skip_report=policy.skip_report, allow_pipe=policy.allow_pipe):
            yield UnitCut(cut, unit.label, cut.id)


class CutsUnits(UnitReader):
    """A cuts manifest: slices of its cuts with their line numbers, read here (repeated
    ids are checked over the whole manifest)."""

    name = "cuts"
    unit_name = "manifest"
    stats_fatal = ("truncated",)
    index_note = _MANIFEST_INDEX

    def work_units(self, path: str, policy: ReadPolicy, *, audio: bool = True,
                   chunk_size: int = DEFAULT_UNIT_CUTS, **_: Any
                   ) -> Tuple[Iterator[WorkUnit], Optional[int]]:
        return slices(self._cuts(path, policy), self.name, path, chunk_size), None

    @staticmethod
    def _cuts(path: str, policy: ReadPolicy) -> Iterator[UnitCut]:
        from wenet_lhotse.sources.manifest import duplicate_error, iter_manifest

        if ".jsonl" not in path:  # a JSON manifest: Lhotse reads it whole
            from lhotse import CutSet

            yield from (UnitCut(c, path) for c in CutSet.from_file(path))
            return
        seen = KeySet()
        for item, no in iter_manifest(path, policy.allow_pipe):
            if not isinstance(item, WenetDataError) and not seen.add(item.id):
                item = duplicate_error(item.id, path, no)
            if isinstance(item, WenetDataError):
                policy.handle(item)
                continue
            yield UnitCut(item, path, None, no)


class SharUnits(UnitReader):
    """A Shar directory: one unit per shard (its cuts manifest alone for metadata),
    read in the worker; a shard without its recording tar (or a tar without its
    manifest) is a problem, a shard written while items were skipped is one for
    ``validate``."""

    name = "shar"
    unit_name = "shard"
    keys_repeat_across_units = True
    reads_in_caller = False
    index_note = _MANIFEST_INDEX

    def work_units(self, path: str, policy: ReadPolicy, *, audio: bool = True, **_: Any
                   ) -> Tuple[Iterator[WorkUnit], Optional[int]]:
        from wenet_lhotse.sources.shar_dir import cuts_files

        if not audio:
            return (WorkUnit(self.name, c, {"cuts": [c]}) for c in cuts_files(path)), None
        units = list(self._shards(path, policy))
        return iter(units), len(units)

    def _shards(self, in_dir: str, policy: ReadPolicy) -> Iterator[WorkUnit]:
        """The fields of each complete shard, in order; unpaired files are problems."""
        from wenet_lhotse.sources.shar_dir import shar_files

        files = shar_files(in_dir)
        tars = {f: {i: p for i, p in by_index.items() if p.endswith(".tar")}
                for f, by_index in files.items() if f != "cuts"}
        cut_files = {i: p for i, p in files.get("cuts", {}).items() if ".jsonl" in p}
        for i, cuts_path in sorted(cut_files.items()):
            fields: Dict[str, List[str]] = {"cuts": [cuts_path]}
            fields.update({f: [by_index[i]] for f, by_index in tars.items() if i in by_index})
            if "recording" not in fields:
                policy.handle(WenetDataError(f"no recording.{i:06d}.tar next to it",
                                             cuts_path, kind="unpaired"))
                continue
            yield WorkUnit(self.name, fields["recording"][0], fields)
        others = {i for by_index in tars.values() for i in by_index} - set(cut_files)
        for i in sorted(others):
            policy.handle(WenetDataError("tar without its cuts manifest", str(in_dir),
                                         member=f"*.{i:06d}.tar", kind="unpaired"))

    def read_unit(self, unit: WorkUnit, policy: ReadPolicy, *, audio: bool = True
                  ) -> Iterator[UnitCut]:
        from lhotse import CutSet

        for cut in CutSet.from_shar(fields=unit.payload):
            yield UnitCut(cut, unit.label, cut.id)

    def audit_unit(self, unit: WorkUnit) -> List[WenetDataError]:
        from wenet_lhotse.sources.shar_record import read_record

        cuts_path = unit.payload["cuts"][0]
        record = read_record(cuts_path)
        if record is None:
            return []
        kinds = ", ".join(f"{k}: {v}" for k, v in sorted(record.get("kinds", {}).items()))
        return [WenetDataError(
            f"shard written with {record.get('skipped')} input items skipped ({kinds}); "
            "fix the input and run the import again to rewrite it", cuts_path,
            kind="incomplete_shard")]


_READERS: Dict[str, UnitReader] = {r.name: r for r in (RawUnits(), ShardUnits(),
                                                       CutsUnits(), SharUnits())}


def unit_reader(kind: str) -> UnitReader:
    """The work-unit hooks of input kind ``kind``."""
    if kind not in _READERS:
        raise WenetDataError(f"the {kind!r} input kind cannot be read by the data tools",
                             kind, kind="format")
    return _READERS[kind]
