"""Open any data source the CLI accepts: WeNet raw list, WeNet shard list, Lhotse
cuts manifest (``.jsonl``/``.jsonl.gz``) or Lhotse Shar directory.

The kind is told from the content, never from the name alone: a directory is
Shar; a JSON-lines file whose first record has ``"key"`` is a WeNet raw list,
one with ``"id"`` a Lhotse manifest; any other text file is a shard list.
"""

from __future__ import annotations

import gzip
import json
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, List, Optional, Tuple, Union

from lhotse import CutSet

from wenet_lhotse.formats.errors import SkipReport, WenetDataError

if TYPE_CHECKING:
    from wenet_lhotse.formats.shards import ShardEntry

logger = logging.getLogger(__name__)

Pathlike = Union[str, os.PathLike]

#: Kinds returned by :func:`detect_input_kind`.
INPUT_KINDS = ("raw", "shard", "cuts", "shar")


def _first_line(path: Path) -> str:
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.strip():
                    return line.strip()
    except (OSError, EOFError) as err:
        raise WenetDataError(f"cannot read: {err}", str(path), kind="io") from err
    return ""


def detect_input_kind(path: Pathlike) -> str:
    """``"raw"``, ``"shard"``, ``"cuts"`` or ``"shar"`` for ``path`` (see module doc)."""
    p = Path(path)
    if p.is_dir():
        if not any(p.glob("cuts.*.jsonl*")):
            raise WenetDataError("directory without cuts.*.jsonl.gz: not a Lhotse Shar "
                                 "directory", str(p), kind="format")
        return "shar"
    if not p.exists():
        raise WenetDataError("no such file or directory", str(p), kind="missing_file")
    line = _first_line(p)
    if not line:
        return "raw"  # an empty list: the same answer as formats.detect_data_type
    if line.startswith("{"):
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            return "raw"  # a WeNet list with a bad first line: its reader names the line
        if isinstance(obj, dict) and "key" not in obj and "id" in obj:
            return "cuts"
        return "raw"
    if p.suffix == ".gz":
        return "cuts"
    return "shard"


def detect_wenet_type(path: Pathlike) -> str:
    """``"raw"`` or ``"shard"`` for a WeNet list file."""
    kind = detect_input_kind(path)
    if kind not in ("raw", "shard"):
        raise WenetDataError(f"expected a WeNet data.list, found a Lhotse {kind} input",
                             str(path), kind="format")
    return kind


def list_shard_paths(list_path: Pathlike, *, strict: bool = True,
                     skip_report: Optional[SkipReport] = None) -> List[ShardEntry]:
    """The tars of a WeNet shard list, in order, each with the list line naming it
    (relative local paths resolve against the working directory, as in WeNet)."""
    from wenet_lhotse.formats.shards import read_shard_entries

    return read_shard_entries([str(list_path)], strict=strict, skip_report=skip_report)


def read_one_tar(tar: Union[str, ShardEntry], *, strict: bool = True,
                 skip_report: Optional[SkipReport] = None) -> CutSet:
    """Lazy cuts (in-memory audio) of one WeNet tar shard (path, URL or ``pipe:``),
    streamed once."""
    from wenet_lhotse.formats.shards import LazyWenetShardIterator

    return CutSet(LazyWenetShardIterator([tar], strict=strict, skip_report=skip_report))


def open_cuts(
    path: Pathlike,
    *,
    kind: str = "auto",
    strict: bool = True,
    skip_report: Optional[SkipReport] = None,
    with_audio: bool = True,
    wav_root: Optional[Pathlike] = None,
) -> Tuple[CutSet, str]:
    """Open ``path`` lazily as a CutSet; returns ``(cuts, kind)``.

    :param kind: one of :data:`INPUT_KINDS` or ``"auto"`` (detected).
    :param strict: WeNet readers raise on the first bad item; otherwise they skip it
        and record it in ``skip_report``.
    :param with_audio: for Shar, False reads only the cut manifests (no tars).
    :param wav_root: for raw lists, the directory relative ``wav`` paths resolve
        against (default: the working directory, as WeNet does).
    """
    if kind == "auto":
        kind = detect_input_kind(path)
    if kind == "shar":
        from wenet_lhotse.convert.shar import read_shar

        return read_shar(path, with_audio=with_audio), kind
    if kind == "cuts":
        return CutSet.from_file(path), kind
    if kind == "raw":
        from wenet_lhotse.formats.raw_list import read_raw_list

        return read_raw_list([str(path)], wav_root=wav_root, strict=strict,
                             skip_report=skip_report), kind
    if kind == "shard":
        from wenet_lhotse.formats.shards import read_shard_list

        return read_shard_list([str(path)], strict=strict, skip_report=skip_report), kind
    raise ValueError(f"kind must be one of {INPUT_KINDS} or 'auto', got {kind!r}")
