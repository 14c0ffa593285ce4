"""``read_wenet_list``: either kind of WeNet ``data.list``, told apart by content."""

from __future__ import annotations

from typing import Any, Sequence, Union

from lhotse import CutSet

from wenet_lhotse.formats.errors import WenetDataError
from wenet_lhotse.formats.raw_list import Pathlike, as_path_list, read_raw_list
from wenet_lhotse.formats.shards import read_shard_list

DATA_TYPES = ("auto", "raw", "shard")


def detect_data_type(path: Pathlike) -> str:
    """``"raw"`` when the first non-empty line is a JSON object (starts with ``{``),
    else ``"shard"`` (a list of tar paths/URLs). An empty list file is ``"raw"``."""
    try:
        with open(path, "rb") as f:
            for line in f:
                line = line.strip().lstrip(b"\xef\xbb\xbf").strip()
                if line:
                    return "raw" if line.startswith(b"{") else "shard"
    except OSError as e:
        raise WenetDataError(f"cannot open list: {e}", str(path), kind="missing_file") from e
    return "raw"


def read_wenet_list(
    paths: Union[Pathlike, Sequence[Pathlike]], data_type: str = "auto", **kwargs: Any
) -> CutSet:
    """Open WeNet list(s) as a lazy CutSet: :func:`read_raw_list` for ``"raw"``,
    :func:`read_shard_list` for ``"shard"``; ``"auto"`` decides per file from its
    first non-empty line (all files must agree). ``kwargs`` go to that reader."""
    if data_type == "shards":
        data_type = "shard"
    if data_type not in DATA_TYPES:
        raise ValueError(f"data_type must be one of {DATA_TYPES}, got {data_type!r}")
    files = as_path_list(paths)
    if data_type == "auto":
        kinds = {p: detect_data_type(p) for p in files}
        if len(set(kinds.values())) > 1:
            raise ValueError(f"lists of different types given together: {kinds}")
        data_type = next(iter(kinds.values()), "raw")
    if data_type == "raw":
        return read_raw_list(files, **kwargs)
    return read_shard_list(files, **kwargs)
