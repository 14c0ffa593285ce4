"""``cuts``: a Lhotse cuts manifest (``cuts.jsonl`` / ``cuts.jsonl.gz``; other Lhotse
manifest files through ``CutSet.from_file``).

Detected by a first JSON line with ``"id"`` and no ``"key"``, or a gzip file whose first
line is not JSON. JSON-lines manifests are read line by line with the boundary checks of
:class:`~wenet_lhotse.sources.manifest.LazyCheckedManifest` (errors name file:line); the
map-style loader reads them lazily by line number (the loader's ``JsonlReader``).
"""

from __future__ import annotations

from typing import Any, Iterator, Optional, Sequence, Tuple

from lhotse import CutSet

from wenet_lhotse.errors import WenetDataError
from wenet_lhotse.formats.keyset import KeySet
from wenet_lhotse.io.policy import ReadPolicy
from wenet_lhotse.sources.kinds.base import InputKind, PositionedReaders
from wenet_lhotse.sources.kinds.sniff import NO, SURE, FirstLine
from wenet_lhotse.sources.units import DEFAULT_UNIT_CUTS, MANIFEST_INDEX, UnitCut, WorkUnit, slices


class CutsKind(InputKind):
    name = "cuts"
    description = "Lhotse cuts manifest (cuts.jsonl / cuts.jsonl.gz)"
    import_cuts_refusal = ("already a Lhotse cuts manifest: nothing to import (train from it "
                           "as it is; `wenet-lhotse export` writes WeNet lists)")

    def sniff(self, first: FirstLine) -> int:
        if not first.line:
            return NO
        if not first.is_json:
            return SURE if first.gz else NO
        record = first.record
        return SURE if record is not None and "key" not in record and "id" in record else NO

    def open(self, paths: Sequence[str], policy: ReadPolicy, **_: Any) -> CutSet:
        from wenet_lhotse.sources.manifest import LazyCheckedManifest

        checked = [p for p in paths if ".jsonl" in p]
        out = [CutSet.from_file(p) for p in paths if ".jsonl" not in p]
        if checked:
            out.insert(0, CutSet(LazyCheckedManifest(checked, policy=policy)))
        cuts = out[0]
        for more in out[1:]:
            cuts = cuts + more
        return cuts

    def map_reader(self, spec: Any, readers: PositionedReaders) -> Any:
        return readers.jsonl(spec.paths)

    # -- the tools' work units (sources/units.py): slices with their line numbers ------------
    unit_name = "manifest"
    stats_fatal = ("truncated",)
    index_note = MANIFEST_INDEX

    def work_units(self, path: str, policy: ReadPolicy, *, audio: bool = True,
                   chunk_size: int = DEFAULT_UNIT_CUTS, **_: Any
                   ) -> Tuple[Iterator[WorkUnit], Optional[int]]:
        """Slices of the manifest's cuts, read here (repeated ids are checked over the
        whole manifest), each with its line."""
        return slices(self._located(path, policy), self.name, path, chunk_size), None

    def _located(self, path: str, policy: ReadPolicy) -> Iterator[UnitCut]:
        from wenet_lhotse.sources.manifest import duplicate_error, iter_manifest

        if ".jsonl" not in path:  # a JSON manifest: Lhotse reads it whole, no lines
            yield from (UnitCut(c, path) for c in self.open([path], policy))
            return
        seen = KeySet()
        for item, no in iter_manifest(path, policy=policy):
            if not isinstance(item, WenetDataError) and not seen.add(item.id):
                item = duplicate_error(item.id, path, no)
            if isinstance(item, WenetDataError):
                policy.handle(item)
                continue
            yield UnitCut(item, path, None, no)


KIND = CutsKind()
