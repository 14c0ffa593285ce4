"""Checks at the boundary: what in the data may not become a file name, an
allocation or a number.

* keys (``key`` of a raw line, the member name of a tar, a cut id) become tar member
  names and file names on export; :func:`key_problem` refuses those that would be
  unsafe there: empty, absolute, with a ``..``, ``.`` or empty path component
  (``./x``, ``a//b``: a tar reader normalises those, so what is read back is not what
  was written), with NUL or another
  control character, not valid Unicode (a lone surrogate), or over
  :data:`MAX_KEY_BYTES` bytes in UTF-8 (a file name's limit). WeNet accepts any
  string; keys outside these rules cannot be written safely by anyone.
* tar members must be regular files of at most :func:`max_member_bytes` bytes
  (:func:`member_problem`): a sparse member (PAX ``GNU.sparse``) makes ``tarfile``
  allocate its claimed size in zeros, links and devices have no audio. WeNet reads
  any member; a 40 KB tar could otherwise claim 8 GiB. A member of a compressed tar
  is read in blocks and refused once it decompresses past :func:`max_member_ratio`
  times the compressed bytes it took (a decompression bomb under the byte cap).
* text must be valid Unicode (:func:`text_problem`): JSON's ``\\ud800`` escape decodes
  to a lone surrogate that no UTF-8 writer accepts.
* times must be finite (:func:`is_finite_number`): JSON's ``NaN``/``Infinity``.
* what may be opened at all (``pipe:`` commands, URL protocols, non-regular local
  files) is :mod:`wenet_lhotse.io.access`.
"""

from __future__ import annotations

import math
import os
import re
import tarfile
from typing import Any, Optional

from wenet_lhotse.errors import WenetDataError
from wenet_lhotse.io.access import short as _short

#: Longest key accepted, in bytes of UTF-8 (the usual file name limit).
MAX_KEY_BYTES = 255

#: Default cap on one tar member (bytes): 1 GiB, i.e. 9.3 h of 16 kHz 16-bit mono
#: audio, far above any utterance; set ``WENET_LHOTSE_MAX_MEMBER_BYTES`` to change it.
DEFAULT_MAX_MEMBER_BYTES = 1 << 30

#: A member of a compressed tar may decompress to at most this many times the
#: compressed bytes it took, once past :data:`RATIO_FLOOR_BYTES` (audio compresses by
#: 1-2x with gzip; a 0.9 MB .tar.gz holding a 900 MiB member is 1000x). Set
#: ``WENET_LHOTSE_MAX_MEMBER_RATIO`` to change it.
DEFAULT_MAX_MEMBER_RATIO = 200
#: Decompressed bytes of one member below which the ratio is not checked (64 MiB).
RATIO_FLOOR_BYTES = 64 << 20


def max_member_ratio() -> float:
    """``$WENET_LHOTSE_MAX_MEMBER_RATIO``, else :data:`DEFAULT_MAX_MEMBER_RATIO`."""
    env = os.environ.get("WENET_LHOTSE_MAX_MEMBER_RATIO")
    return float(env) if env else float(DEFAULT_MAX_MEMBER_RATIO)


def max_member_bytes(value: Optional[int] = None) -> int:
    """``value``, else ``$WENET_LHOTSE_MAX_MEMBER_BYTES``, else the default (bytes)."""
    if value is not None:
        return int(value)
    env = os.environ.get("WENET_LHOTSE_MAX_MEMBER_BYTES")
    return int(env) if env else DEFAULT_MAX_MEMBER_BYTES


#: C0 and C1 control characters and DEL.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


def key_problem(key: Any) -> Optional[str]:
    """Why ``key`` cannot be a tar member or file name, or None when it can."""
    if not isinstance(key, str) or not key:
        return "the key is empty"
    try:
        size = len(key.encode("utf-8"))
    except UnicodeEncodeError:
        return "the key is not valid Unicode (lone surrogate)"
    if size > MAX_KEY_BYTES:
        return f"the key is {size} bytes long in UTF-8 (at most {MAX_KEY_BYTES})"
    if _CONTROL.search(key):
        return "the key holds a control character"
    if key.startswith("/"):
        return "the key is an absolute path"
    parts = key.split("/")
    if ".." in parts:
        return "the key has a '..' component"
    if "." in parts or "" in parts:
        # './x', 'a/./b', 'a//b', 'a/': tar readers (Lhotse's Shar) normalise such names,
        # so the member written is not the one read back
        return "the key has an empty or '.' path component"
    return None


def check_key(key: Any, source: str, line: Optional[int] = None,
              member: Optional[str] = None) -> None:
    """Raise :class:`WenetDataError` (kind ``"unsafe_key"``) when :func:`key_problem`."""
    why = key_problem(key)
    if why is not None:
        raise WenetDataError(f"unsafe key {_short(key) if isinstance(key, str) else key!r}: "
                             f"{why}", source, line=line, member=member, kind="unsafe_key")


def text_problem(value: Any, name: str = "") -> Optional[str]:
    """The first string inside ``value`` (str, list, dict) that is not valid Unicode,
    as ``"field 'txt' holds a lone surrogate"``; None when all are valid."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return f"field {name!r} holds a lone surrogate (not valid Unicode)" if name \
                else "a lone surrogate (not valid Unicode)"
        return None
    if isinstance(value, dict):
        for k, v in value.items():
            why = text_problem(k, name) or text_problem(v, k if not name else f"{name}.{k}")
            if why:
                return why
    elif isinstance(value, (list, tuple)):
        for v in value:
            why = text_problem(v, name)
            if why:
                return why
    return None


#: Why a JSON line nested too deeply was refused (``json`` raises RecursionError).
TOO_DEEP = "JSON nested too deeply (over the interpreter's recursion limit)"


def is_finite_number(x: Any) -> bool:
    """An int or float (not bool) that is neither NaN nor infinite."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


_TYPES = {tarfile.SYMTYPE: "a symbolic link", tarfile.LNKTYPE: "a hard link",
          tarfile.CHRTYPE: "a character device", tarfile.BLKTYPE: "a block device",
          tarfile.FIFOTYPE: "a FIFO"}


def member_problem(info: tarfile.TarInfo, limit: int) -> Optional[str]:
    """Why tar member ``info`` is refused (not a regular file, sparse, or over ``limit``
    bytes), or None. Directories are not asked about: readers pass over them."""
    if info.sparse is not None or info.type == tarfile.GNUTYPE_SPARSE:
        return f"sparse member claiming {info.size} bytes: refused (only regular files)"
    if not info.isreg():
        what = _TYPES.get(info.type, f"of type {info.type!r}")
        return f"member is {what}, not a regular file"
    if info.size > limit:
        return (f"member claims {info.size} bytes, over the {limit}-byte limit "
                "(WENET_LHOTSE_MAX_MEMBER_BYTES)")
    return None
