"""``cuts``: a Lhotse cuts manifest (``cuts.jsonl`` / ``cuts.jsonl.gz``; other Lhotse
manifest files through ``CutSet.from_file``).

Detected by a first JSON line with ``"id"`` and no ``"key"``, or a gzip file whose first
line is not JSON. JSON-lines manifests are read line by line with the boundary checks of
:class:`~wenet_lhotse.sources.manifest.LazyCheckedManifest` (errors name file:line); the
map-style loader reads them lazily by line number (the loader's ``JsonlReader``).
"""

from __future__ import annotations

from typing import Any, Sequence

from lhotse import CutSet

from wenet_lhotse.io.policy import ReadPolicy
from wenet_lhotse.sources.kinds.base import InputKind, PositionedReaders
from wenet_lhotse.sources.kinds.sniff import NO, SURE, FirstLine


class CutsKind(InputKind):
    name = "cuts"
    description = "Lhotse cuts manifest (cuts.jsonl / cuts.jsonl.gz)"

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
            out.insert(0, CutSet(LazyCheckedManifest(checked, strict=policy.strict,
                                                     skip_report=policy.skip_report,
                                                     allow_pipe=policy.allow_pipe)))
        cuts = out[0]
        for more in out[1:]:
            cuts = cuts + more
        return cuts

    def map_reader(self, spec: Any, readers: PositionedReaders) -> Any:
        return readers.jsonl(spec.paths)


KIND = CutsKind()
