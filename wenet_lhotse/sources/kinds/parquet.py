"""``parquet``: Parquet files or a ``datasets`` ``save_to_disk`` directory
(:mod:`wenet_lhotse.sources.parquet`): named in the yaml (``type: parquet``, optional
``columns``) or detected, by the ``PAR1`` magic of a Parquet file, the stream header of
an ``.arrow`` file, or a directory holding ``state.json`` and ``*.arrow`` files (or only
``*.parquet`` files). Rows become cuts with in-memory audio; bad rows are named by file
and row. Not a WeNet list: as ``--train_data`` it is refused in one line that says what
to do instead.
"""

from __future__ import annotations

import glob
import os
from typing import Any, Dict, Optional, Sequence

from lhotse import CutSet

from wenet_lhotse.io.policy import ReadPolicy
from wenet_lhotse.sources.kinds.base import InputKind, PositionedReaders, check_columns
from wenet_lhotse.sources.tags import TagCuts

#: How an Arrow IPC stream (``save_to_disk``'s ``data-*.arrow``) or file starts.
ARROW_MAGIC = (b"\xff\xff\xff\xff", b"ARROW1")


class ParquetKind(InputKind):
    name = "parquet"
    description = "Parquet files / datasets save_to_disk directory (audio bytes, text)"
    wenet_list_refusal = ("Parquet: use `type: parquet` in `lhotse_conf.sources` or "
                          "`wenet-lhotse parquet-import`")
    import_cuts_refusal = ("its audio is in the rows, not in files a manifest could point "
                           "at: import it with --shar DIR, or to WeNet shards with "
                           "`wenet-lhotse parquet-import`")
    index_note = ("nothing to index: map mode reads its rows as they are; for indexed WeNet "
                  "shards, `wenet-lhotse parquet-import` it, then `index` the shard list")

    def sniff_magic(self, head: bytes) -> bool:
        return head[:4] == b"PAR1" or head.startswith(ARROW_MAGIC)

    def sniff_dir(self, path: str) -> bool:
        from wenet_lhotse.sources.parquet import is_arrow_dir

        if not os.path.isdir(path):
            return False
        names = os.listdir(path)
        return is_arrow_dir(path) or (bool(names) and all(
            n.endswith(".parquet") or n.startswith(".") for n in names)
            and bool(glob.glob(os.path.join(path, "*.parquet"))))

    def check_spec(self, spec: Any) -> None:
        check_columns(spec, frozenset({"audio", "text", "id"}))

    def open(self, paths: Sequence[str], policy: ReadPolicy, *,
             columns: Optional[Dict[str, Optional[str]]] = None, light: bool = False,
             **_: Any) -> CutSet:
        from wenet_lhotse.sources.parquet import LazyParquetCuts, ParquetColumns

        return CutSet(LazyParquetCuts(paths, ParquetColumns(**(columns or {})), policy=policy,
                                      light=light))

    def open_source(self, spec: Any, policy: ReadPolicy, **kw: Any) -> CutSet:
        return self.open(spec.paths, policy, columns=spec.columns, light=kw.get("light", False))

    def map_reader(self, spec: Any, readers: PositionedReaders) -> Any:
        """Training (``readers.light``): the rows' metadata in memory, each row's audio
        read back when its batch is emitted
        (:class:`~wenet_lhotse.sources.parquet.ParquetRowCut`); otherwise the cuts."""
        tag = TagCuts(spec.tags) if spec.tags else None  # (CutSet.map skips MetaCuts)
        cuts = self.open_source(spec, readers.policy, light=readers.light)
        return readers.in_memory([tag(c) if tag else c for c in cuts])


KIND = ParquetKind()
