"""One WeNet tar shard read once, front to back, into index rows (:func:`index_tar`;
:func:`index_entry` for a listed line, ``pipe:`` included), and the tar's fingerprint
(:func:`fingerprint`). The rows are built by :meth:`TarRows.add`, which the streamed
first pass (:mod:`.index_fragments`) shares.

The tar is read by :class:`~wenet_lhotse.formats.shard_reader.LazyWenetShardIterator`
itself (the same checks, the same utterances, the same skips as a streamed epoch, any
``http(s)://`` or object-storage URL through the same retrying readers), with each
member's data offset recorded. A row per utterance: key, audio suffix, the audio
member's data offset and size (bytes), its CRC-32 (``zlib.crc32``, checked by every
read by offset: a tar edited in place is never read as other bytes), ``num_samples``,
sampling rate (Hz), channels, text, and the other fields (speaker, lang, custom
members) as JSON. What the reader skipped is kept as ``bad`` (message, kind, member): a
loader counts those each epoch as a streamed epoch would meet them.

The fingerprint of a tar is its size (bytes) and a SHA-1 of its first and last 64 KiB
(the bytes of a small tar counted in both), computed from the bytes of the one
sequential read; a local tar also keeps its ``mtime_ns`` and ``ctime_ns``; an object in
object storage is fingerprinted by its ETag and size instead. A compressed tar has no
offsets: its utterances cannot be read by offset and it is recorded as bad (kind
``"not_indexable"``).
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import zlib
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from wenet_lhotse.errors import SkipReport, WenetDataError
from wenet_lhotse.formats.layout import AUDIO_SUFFIXES
from wenet_lhotse.formats.shard_list import ShardEntry
from wenet_lhotse.formats.shard_reader import LazyWenetShardIterator
from wenet_lhotse.io.policy import ReadPolicy
from wenet_lhotse.io.remote import is_remote
from wenet_lhotse.io.streams import is_local, is_pipe, local_path

#: Skip kinds after which the rest of a tar was not read.
TAR_KINDS = ("truncated", "bad_tar", "missing_file", "io", "timeout", "bad_member")

#: Bytes hashed at each end of a tar for its fingerprint.
EDGE = 64 << 10


@dataclass
class TarRows:
    """The index rows of one tar (parallel lists, one item per utterance) plus the
    tar's fingerprint; ``bad`` lists what the reader skipped as (message, kind,
    member)."""

    url: str
    size: Optional[int] = None
    mtime_ns: Optional[int] = None
    digest: Optional[str] = None
    ctime_ns: Optional[int] = None
    keys: List[str] = field(default_factory=list)
    fmts: List[str] = field(default_factory=list)
    offsets: List[int] = field(default_factory=list)
    sizes: List[int] = field(default_factory=list)
    num_samples: List[int] = field(default_factory=list)
    rates: List[int] = field(default_factory=list)
    channels: List[int] = field(default_factory=list)
    crcs: List[int] = field(default_factory=list)
    texts: List[str] = field(default_factory=list)
    extras: List[str] = field(default_factory=list)
    bad: List[Tuple[str, str, Optional[str]]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.keys)

    def add(self, cut: Any, suffix: str, offset: int, size: int, crc: int) -> None:
        """Append the row of ``cut`` (its audio member: ``suffix``, data ``offset`` and
        ``size`` in bytes, CRC-32): the one row builder of the indexer and the streamed
        first pass (:mod:`.index_fragments`)."""
        rec = cut.recording
        self.keys.append(cut.id)
        self.fmts.append(suffix)
        self.offsets.append(offset)
        self.sizes.append(size)
        self.crcs.append(crc)
        self.num_samples.append(rec.num_samples)
        self.rates.append(rec.sampling_rate)
        self.channels.append(len(rec.sources[0].channels))
        self.texts.append(cut.supervisions[0].text)
        self.extras.append(_extra(cut))


def digest_of(head: bytes, tail: bytes) -> str:
    """The fingerprint hash of a tar whose first bytes are ``head`` and last ``tail``."""
    return hashlib.sha1(head[:EDGE] + tail[-EDGE:]).hexdigest()[:20]


def local_fingerprint(path: str, with_digest: bool = True
                      ) -> Tuple[int, int, Optional[str]]:
    """``(size in bytes, mtime_ns, digest or None)`` of a local tar (OSError if gone)."""
    st = os.stat(path)
    digest = None
    if with_digest:
        with open(path, "rb") as f:
            head = f.read(EDGE)
            f.seek(max(0, st.st_size - EDGE))
            tail = f.read(EDGE)
        digest = digest_of(head, tail)
    return st.st_size, st.st_mtime_ns, digest


class FingerprintedStream(io.RawIOBase):
    """A byte stream passed through, its size counted and its two ends kept."""

    def __init__(self, inner: Any) -> None:
        super().__init__()
        self._inner = inner
        self.raw = getattr(inner, "raw", None)  # TailReader's member deadline hook
        self.head = bytearray()
        self.tail = bytearray()
        self.size = 0

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        data = self._inner.read(n)
        if data:
            if len(self.head) < EDGE:
                self.head += data[:EDGE - len(self.head)]
            self.tail += data
            if len(self.tail) > 2 * EDGE:
                del self.tail[:-EDGE]
            self.size += len(data)
        return data

    def readinto(self, b: Any) -> int:
        data = self.read(len(b))
        b[:len(data)] = data
        return len(data)

    def close(self) -> None:
        try:
            self._inner.close()
        finally:
            super().close()


class _Indexer(LazyWenetShardIterator):
    """The shard reader, yielding ``(cut, audio suffix, offset, size, CRC-32)``."""

    record_offsets = True

    def _open_input(self, name: str, limits: Any) -> Any:
        self.stream = FingerprintedStream(super()._open_input(name, limits))
        return self.stream

    def _make_cut(self, tar: str, key: str, group: Dict[str, Tuple[str, bytes]],
                  seen: Any) -> Tuple[Any, str, int, int, int]:
        cut = super()._make_cut(tar, key, group, seen)
        suffix = next(s for s in group if s in AUDIO_SUFFIXES)
        member, data = group[suffix]
        offset = self._offsets.get(member)
        if offset is None:
            raise WenetDataError("compressed tar: members have no offsets to read them by "
                                 "(store shards uncompressed to index them)", tar,
                                 member=member, kind="not_indexable")
        return cut, suffix, offset, len(data), zlib.crc32(data)


def _extra(cut: Any) -> str:
    sup = cut.supervisions[0]
    out: Dict[str, Any] = {}
    if sup.speaker is not None:
        out["speaker"] = sup.speaker
    if sup.language is not None:
        out["lang"] = sup.language
    if cut.custom:
        out["custom"] = {k: ({"base64": base64.b64encode(v).decode("ascii")}
                             if isinstance(v, bytes) else v) for k, v in cut.custom.items()}
    return json.dumps(out, ensure_ascii=False) if out else ""


def decode_extra(extra: str) -> Tuple[Optional[str], Optional[str], Optional[Dict[str, Any]]]:
    """``(speaker, lang, custom)`` from a row's ``extra`` JSON ("" for none)."""
    if not extra:
        return None, None, None
    obj = json.loads(extra)
    custom = obj.get("custom")
    if custom:
        custom = {k: (base64.b64decode(v["base64"]) if isinstance(v, dict) else v)
                  for k, v in custom.items()}
    return obj.get("speaker"), obj.get("lang"), custom


def index_tar(entry: Any, *,
              policy: Optional[ReadPolicy] = None) -> TarRows:
    """Read one tar (path, URL or :class:`ShardEntry`) once and return its rows; never
    raises for bad data (it goes to ``bad``; an unreadable tar is one bad item).
    ``policy`` gives ``pipe:`` permission, URL protocols, member cap and network
    limits; whatever its ``strict``, the indexer skips
    and records, into a report of its own."""
    entry = entry if isinstance(entry, ShardEntry) else ShardEntry(str(entry))
    report = SkipReport(log=False)
    policy = (policy or ReadPolicy())
    reader = _Indexer([entry], check_duplicates=True,
                      policy=policy.replace(strict=False, skip_report=report))
    out = TarRows(url=entry.url)
    for cut, suffix, offset, size, crc in reader:
        out.add(cut, suffix, offset, size, crc)
    out.bad = [(item.message, item.kind, item.member) for item in report]
    fingerprint(out, getattr(reader, "stream", None))
    return out


def fingerprint(out: TarRows, stream: Any) -> None:
    """Set the fingerprint of tar ``out`` (its rows and ``bad`` complete) after the one
    read: a local tar's file, else the ``stream`` it was read through (a
    :class:`FingerprintedStream`; unset where reading stopped early)."""
    if is_local(out.url):  # the file itself: right even where reading stopped early
        try:
            out.size, out.mtime_ns, out.digest = local_fingerprint(local_path(out.url))
            out.ctime_ns = os.stat(local_path(out.url)).st_ctime_ns
        except OSError:
            pass
    elif stream is not None and not any(kind in TAR_KINDS for _, kind, _ in out.bad):
        out.size = stream.size
        out.digest = digest_of(bytes(stream.head), bytes(stream.tail))
    if is_remote(out.url) and not any(k in ("missing_file", "io") for _, k, _ in out.bad):
        out.digest = etag_digest(out.url) or out.digest


def etag_digest(url: str) -> Optional[str]:
    """The fingerprint of an object in object storage (its ETag and size), None when it
    has no ETag."""
    from wenet_lhotse.io.remote import _filesystem

    fs, path = _filesystem(url)
    try:
        info = fs.info(path)
    except Exception:
        return None
    tag = info.get("ETag") or info.get("etag")
    return f"etag:{str(tag).strip(chr(34))}:{info.get('size')}" if tag else None


def index_entry(entry: ShardEntry, policy: Optional[ReadPolicy] = None) -> TarRows:
    """The index rows of one listed tar (:func:`index_tar`); a ``pipe:`` line has no
    offsets and is one bad item (kind ``"not_indexable"``), read by nobody."""
    if is_pipe(entry.url):
        return TarRows(url=entry.url, bad=[("a pipe: has no offsets to read members by; "
                                            "write the tar to storage to index it",
                                            "not_indexable", None)])
    return index_tar(entry, policy=policy)
