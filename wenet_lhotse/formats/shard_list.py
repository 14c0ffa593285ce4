"""A WeNet shard list file: one tar per line (a local path, an ``http(s)://`` URL, or
``pipe:CMD`` when allowed), each remembered with the list line that named it."""

from __future__ import annotations

import codecs
import os
from dataclasses import dataclass
from typing import List, Optional, Sequence, Union

from lhotse.utils import Pathlike

from wenet_lhotse.errors import WenetDataError
from wenet_lhotse.io.access import open_regular
from wenet_lhotse.io.policy import ReadPolicy
from wenet_lhotse.io.remote import is_remote
from wenet_lhotse.io.streams import as_path_list, is_local, is_pipe, local_path, open_input


@dataclass(frozen=True)
class ShardEntry:
    """One tar of a shard list: its path/URL/pipe and where it was listed."""

    url: str
    list_file: Optional[str] = None
    line: Optional[int] = None

    @property
    def listed_at(self) -> str:
        return f" (listed at {self.list_file}:{self.line})" if self.list_file else ""


def read_shard_entries(
    paths: Union[Pathlike, Sequence[Pathlike]],
    *,
    policy: Optional[ReadPolicy] = None,
) -> List[ShardEntry]:
    """Read shard list file(s): one tar per non-empty line (LF or CRLF). Relative
    local paths are made absolute against the working directory. A ``pipe:`` line
    the ``policy`` does not allow is bad input (kind ``"refused"``, never run), as is
    a URL of a protocol it does not allow."""
    policy = (policy or ReadPolicy())
    entries = []
    for path in as_path_list(paths):
        try:
            f = open_input(path, policy=policy) if is_remote(path) else open_regular(path)
        except OSError as e:
            raise WenetDataError(f"cannot open shard list: {e}", path, kind="missing_file") from e
        try:
            with f:  # read line by line, each within the policy's line limit
                for lineno, raw in policy.lines(f, str(path)):
                    entry = _entry(raw, str(path), lineno, policy)
                    if entry is not None:
                        entries.append(entry)
        except OSError as e:
            raise WenetDataError(f"cannot read shard list: {e}", path, kind="io") from e
    return entries


def _entry(raw: bytes, path: str, lineno: int, policy: ReadPolicy) -> Optional[ShardEntry]:
    """The tar of one list line, None for an empty or bad one (handled by ``policy``)."""
    raw = raw.strip()
    if lineno == 1 and raw.startswith(codecs.BOM_UTF8):
        raw = raw[len(codecs.BOM_UTF8):]
    if not raw:
        return None
    try:
        name = raw.decode("utf-8")
    except UnicodeDecodeError:
        policy.handle(WenetDataError("line is not valid UTF-8", path, line=lineno,
                                     kind="encoding"))
        return None
    if is_pipe(name):
        try:
            policy.check_pipe(path, line=lineno)
        except WenetDataError as err:  # one bad line: raised or skipped, as the policy says
            policy.handle(err)
            return None
    why = policy.url_problem(name)
    if why is not None:
        policy.handle(WenetDataError(why, path, line=lineno, kind="refused"))
        return None
    if is_local(name):
        name = os.path.abspath(local_path(name))
    return ShardEntry(name, path, lineno)
