"""The skip record in the gzip header of a Shar shard's ``cuts.<i>.jsonl.gz``, read.

:mod:`wenet_lhotse.convert.shar_state` writes it (what it holds and why is documented
there); readers -- ``validate`` through the Shar kind, a rerun of the conversion -- read
it here, below the converters.
"""

from __future__ import annotations

import json
import struct
from typing import Any, Dict, Optional

from lhotse.utils import Pathlike

_TAG = b"wenet-lhotse-skips:"
#: The key of the input fingerprint in the header's record.
FINGERPRINT_KEY = "input"
_FHCRC, _FEXTRA, _FNAME, _FCOMMENT = 0x02, 0x04, 0x08, 0x10
#: a gzip header's MTIME field (bytes 4-8) when no time stamp is stored (RFC 1952)
_NO_MTIME = b"\0\0\0\0"


def _header_end(data: bytes) -> Optional[tuple]:
    """``(flags, end of FEXTRA+FNAME, end of whole header)`` of a gzip member header."""
    if len(data) < 10 or data[:2] != b"\x1f\x8b":
        return None
    flags, pos = data[3], 10
    if flags & _FEXTRA:
        (xlen,) = struct.unpack("<H", data[pos:pos + 2])
        pos += 2 + xlen
    if flags & _FNAME:
        pos = data.index(b"\0", pos) + 1
    name_end = pos
    if flags & _FCOMMENT:
        pos = data.index(b"\0", pos) + 1
    if flags & _FHCRC:
        pos += 2
    return flags, name_end, pos


def read_record(cuts_path: Pathlike) -> Optional[Dict[str, Any]]:
    """The skip record of a shard's manifest, or None (none, or not readable)."""
    record = _read_comment(cuts_path)
    if record is None or not record.get("skipped"):
        return None
    return {k: v for k, v in record.items() if k != FINGERPRINT_KEY}


def read_fingerprint(cuts_path: Pathlike) -> Optional[str]:
    """The input fingerprint a shard was written from (None: an older shard)."""
    record = _read_comment(cuts_path)
    value = record.get(FINGERPRINT_KEY) if record is not None else None
    return value if isinstance(value, str) else None


def _read_comment(cuts_path: Pathlike) -> Optional[Dict[str, Any]]:
    try:
        with open(cuts_path, "rb") as f:
            head = f.read(1 << 16)
        parsed = _header_end(head)
    except (OSError, ValueError, struct.error):
        return None
    if parsed is None or not parsed[0] & _FCOMMENT:
        return None
    comment = head[parsed[1]:head.index(b"\0", parsed[1])]
    if not comment.startswith(_TAG):
        return None
    try:
        record = json.loads(comment[len(_TAG):])
    except ValueError:
        return None
    return record if isinstance(record, dict) else None
