"""``parquet``: Parquet files or a ``datasets`` ``save_to_disk`` directory
(:mod:`wenet_lhotse.sources.parquet`), named in the yaml (``type: parquet``, optional
``columns``), never detected. Rows become cuts with in-memory audio; bad rows are named
by file and row.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Sequence

from lhotse import CutSet

from wenet_lhotse.io.policy import ReadPolicy
from wenet_lhotse.sources.kinds.base import InputKind, check_columns


class ParquetKind(InputKind):
    name = "parquet"
    description = "Parquet files / datasets save_to_disk directory (audio bytes, text)"
    detected = False

    def check_spec(self, spec: Any) -> None:
        check_columns(spec, frozenset({"audio", "text", "id"}))

    def open(self, paths: Sequence[str], policy: ReadPolicy, *,
             columns: Optional[Dict[str, Optional[str]]] = None, **_: Any) -> CutSet:
        from wenet_lhotse.sources.parquet import LazyParquetCuts, ParquetColumns

        return CutSet(LazyParquetCuts(paths, ParquetColumns(**(columns or {})),
                                      strict=policy.strict, skip_report=policy.skip_report))

    def open_source(self, spec: Any, policy: ReadPolicy, **_: Any) -> CutSet:
        return self.open(spec.paths, policy, columns=spec.columns)


KIND = ParquetKind()
