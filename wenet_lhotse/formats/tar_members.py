"""The members of one tar read front to back: ``tarfile``'s results at a fraction of
its CPU for the common tar.

Contract: :class:`TarMembers` over a :class:`~wenet_lhotse.io.streams.TailReader`
yields the same members (name, size, type), returns the same member bytes, raises the
same exceptions at the same members and reports the same end of archive
(:meth:`TarMembers.end_problem`) as ``tarfile.open(fileobj=stream, mode="r|*")``
followed by a look at the block where ``tarfile`` stopped (it stops silently at a
truncated or invalid header). It never seeks, so pipes, HTTP and object storage take
the same path as local files.

The fast path parses each 512-byte header itself (checksum, number fields, name, size,
type), reads the previous member's padding and the next header in one read, and each
member's data in one sized read: ``tarfile`` in stream mode joins and re-slices a
10 KiB buffer per read and spends ~25 us per header in ``TarInfo.frombuf`` (this path:
~4 us). It parses only plain headers -- a regular file or an empty directory, octal
number fields, no ustar prefix, the unsigned checksum; ``TarInfo.frombuf`` itself reads
any other header, so odd but valid spellings (base-256 numbers, a signed checksum, a
ustar name prefix) give the same plain member. What is not a plain member goes, with
the rest of the stream, to ``tarfile``: a stream that ``r|*`` could take for compressed
and any first header that is not plain (from byte 0, mode ``r|*``), and any later header
``frombuf`` accepts that is not plain (pax and GNU long-name headers, links, devices,
sparse files, a directory with data: mode ``r|``). The header block already read is
replayed to ``tarfile``, which then reads exactly as it would have from the start: its
only offset-0 special cases are errors for an invalid, empty or truncated first header
(those are handed over at byte 0 only), and a pax global header (which changes the
members after it) is never passed by the fast path. A later header that ``frombuf``
refuses (invalid, truncated, missing, or a zero block) ends the archive, as in
``tarfile``, and the end is checked as the reader always did.

Differs from ``tarfile`` in timing only: a member's data is one read, so the member
deadline (checked by the ``TailReader`` after each read) is checked once per member
instead of per 10 KiB.
"""

from __future__ import annotations

import re
import tarfile
import zlib
from typing import Any, Iterator, Optional, Tuple, Union

from wenet_lhotse.errors import WenetDataError
from wenet_lhotse.formats.checks import RATIO_FLOOR_BYTES, max_member_ratio
from wenet_lhotse.io.streams import BLOCK, TailReader

_ZERO_BLOCK = bytes(BLOCK)

#: What ``tarfile`` mode ``r|*`` takes for a compressed stream (a superset: "BZh").
_COMPRESSED = (b"\x1f\x8b\x08", b"BZh", b"\x5d\x00\x00\x80", b"\xfd7zXZ")

#: (start, end) of the number fields ``TarInfo.frombuf`` parses (mode, uid, gid, size,
#: mtime, chksum, devmajor, devminor): any one it cannot read makes the header invalid.
_NUMBERS = ((100, 108), (108, 116), (116, 124), (124, 136), (136, 148), (148, 156),
            (329, 337), (337, 345))

#: ``tarfile`` raises this when a member's data or padding ends early.
_UNEXPECTED_END = "unexpected end of data"

#: Types read on the fast path (a regular file; ``AREGTYPE`` ending in "/" is a directory).
_PLAIN_TYPES = (tarfile.REGTYPE, tarfile.AREGTYPE, tarfile.DIRTYPE)


class MemberHeader:
    """A plain member (regular file or empty directory) read by the fast path: the
    attributes of a ``tarfile.TarInfo`` that readers and
    :func:`~wenet_lhotse.formats.checks.member_problem` use (``name``, ``size`` in
    bytes, ``type``, ``sparse``, ``isreg()``, ``isdir()``), with ``tarfile``'s values."""

    __slots__ = ("name", "size", "type")
    sparse = None

    def __init__(self, name: str, size: int, type: bytes) -> None:
        self.name = name
        self.size = size
        self.type = type

    def isreg(self) -> bool:
        return self.type != tarfile.DIRTYPE

    def isdir(self) -> bool:
        return self.type == tarfile.DIRTYPE


Member = Union[MemberHeader, tarfile.TarInfo]


#: A number field as ``tarfile.nti`` reads octal digits: spaces, digits, spaces, then
#: a NUL and anything (or the field's end). Other spellings go to ``frombuf``.
_OCTAL = re.compile(rb" *([0-7]*) *(?:\0.*)?", re.S)


def plain_header(buf: bytes) -> Optional[Tuple[str, int, bytes]]:
    """``(name, size in bytes, type)`` of a plain header block (see the module doc),
    exactly as ``tarfile.TarInfo.frombuf`` reads them; None for any other block."""
    kind = buf[156:157]
    if len(buf) != BLOCK or kind not in _PLAIN_TYPES or buf[345]:
        return None
    fields = [_OCTAL.fullmatch(buf, start, end) for start, end in _NUMBERS]
    if not all(fields):
        return None
    # The unsigned checksum: the bytes summed with the checksum field as 8 spaces. Each
    # half sums to at most 65,280 < 65,521, so adler32's low half is 1 + the exact sum.
    total = (zlib.adler32(buf[:256]) & 0xFFFF) + (zlib.adler32(buf[256:]) & 0xFFFF) - 2
    if int(fields[5][1] or b"0", 8) != total - sum(buf[148:156]) + 256:
        return None
    name = buf[:100].split(b"\0", 1)[0].decode(tarfile.ENCODING, "surrogateescape")
    size = int(fields[3][1] or b"0", 8)
    if kind == tarfile.AREGTYPE and name.endswith("/"):
        kind = tarfile.DIRTYPE  # an old V7 tar's directory
    if kind == tarfile.DIRTYPE:
        if size:
            return None  # tarfile reads a directory's "data" as the next headers
        name = name.rstrip("/")
    return name, size, kind


def read_exact(stream: Any, n: int) -> bytes:
    """``n`` bytes of ``stream`` (anything with ``read``), fewer only at its end."""
    if n <= 0:
        return b""
    data = stream.read(n)
    if len(data) == n or not data:
        return data
    parts, got = [data], len(data)
    while got < n:
        more = stream.read(n - got)
        if not more:
            break
        parts.append(more)
        got += len(more)
    return b"".join(parts)


class _Replay:
    """A stream that returns ``head`` first, then reads on from ``stream``."""

    def __init__(self, head: bytes, stream: TailReader) -> None:
        self._head = head
        self._stream = stream

    def read(self, n: int = -1) -> bytes:
        head, self._head = self._head, b""
        self.read = self._stream.read  # type: ignore[method-assign]
        return head if head else self._stream.read(n)


class TarMembers:
    """Iterates the members of the tar in ``stream`` (see the module doc); ``fast=False``
    reads it all with ``tarfile``. Read a member's bytes with :meth:`read` before asking
    for the next member; :meth:`end_problem` after the last one."""

    def __init__(self, stream: TailReader, fast: bool = True) -> None:
        self._stream = stream
        self._fast = fast
        self._tar: Optional[tarfile.TarFile] = None
        self._base: Optional[int] = None  # stream offset of tarfile's offset 0
        self._unread = 0  # fast path: bytes of the current member's data not read
        self._problem: Optional[Tuple[str, str]] = None

    @property
    def handed_over(self) -> Optional[int]:
        """The stream offset (bytes) from which ``tarfile`` reads, None while (and when)
        the fast path read it all."""
        return self._base

    def __enter__(self) -> TarMembers:
        return self

    def __exit__(self, *exc) -> None:
        if self._tar is not None:
            self._tar.__exit__(*exc)

    def __iter__(self) -> Iterator[Member]:
        stream = self._stream
        block = read_exact(stream, BLOCK) if self._fast else b""
        if not self._fast or block.startswith(_COMPRESSED):
            yield from self._hand_over(block, 0)
            return
        offset = 0  # where ``block`` starts in the stream
        while True:
            plain = plain_header(block)
            if plain is None:
                plain = self._other_header(block, offset)
                if plain is None:
                    yield from self._hand_over(block, offset)
                    return
                if not plain:
                    return
            name, size, kind = plain
            self._unread = size
            yield MemberHeader(name, size, kind)
            while self._unread:  # not read by the caller: skip it as tarfile does
                skipped = len(read_exact(stream, min(self._unread, 1 << 20)))
                if not skipped:
                    raise tarfile.ReadError(_UNEXPECTED_END)
                self._unread -= skipped
            pad = -size % BLOCK
            buf = read_exact(stream, pad + BLOCK)
            if len(buf) < pad:
                raise tarfile.ReadError(_UNEXPECTED_END)
            offset += BLOCK + size + pad
            block = buf[pad:]

    def _other_header(self, block: bytes, offset: int) -> Optional[tuple]:
        """A header block at ``offset`` that is not plain: ``(name, size, type)`` when
        ``frombuf`` reads a plain member from it after all, None to hand over to
        ``tarfile``, ``()`` at the end of the archive (``end_problem`` set)."""
        problem: Optional[Tuple[str, str]] = None
        try:
            info = tarfile.TarInfo.frombuf(block, tarfile.ENCODING, "surrogateescape")
        except Exception as e:
            if offset == 0 or not isinstance(e, tarfile.HeaderError):
                return None  # tarfile's own errors (a bad first header, the unforeseen)
            if isinstance(e, (tarfile.EmptyHeaderError, tarfile.TruncatedHeaderError)):
                problem = ("truncated tar (no end-of-archive block after the last member)",
                           "truncated")
            elif not isinstance(e, tarfile.EOFHeaderError):  # EOF: a zero block, the end
                problem = ("invalid tar header after the last member read (corrupt tar)",
                           "bad_tar")
        else:
            if (info.type not in _PLAIN_TYPES or info.sparse is not None or info.size < 0
                    or (info.isdir() and info.size)):
                return None
            return info.name, info.size, info.type
        while self._stream.read(1 << 16):  # read to the end, as the reader always did
            pass
        self._problem = problem
        return ()

    def _hand_over(self, head: bytes, offset: int) -> Iterator[tarfile.TarInfo]:
        self._base = offset
        fileobj = _Replay(head, self._stream) if head else self._stream
        self._tar = tarfile.open(fileobj=fileobj, mode="r|*" if offset == 0 else "r|")
        yield from self._tar

    def data_offset(self, member: Member) -> Optional[int]:
        """The stream offset (bytes) of ``member``'s data, asked before :meth:`read`;
        None in a compressed stream (no offset in the file holds it)."""
        if self._tar is None:
            return self._stream.pos
        if getattr(self._tar.fileobj, "comptype", "tar") != "tar":
            return None
        return (self._base or 0) + member.offset_data

    def read(self, member: Member) -> bytes:
        """The data of ``member``, the member just yielded (one read on the fast path)."""
        if self._tar is not None:
            if getattr(self._tar.fileobj, "comptype", "tar") == "tar":
                return self._tar.extractfile(member).read(member.size)
            return self._read_compressed(member)
        data = read_exact(self._stream, member.size)
        self._unread = 0
        if len(data) != member.size:
            raise tarfile.ReadError(_UNEXPECTED_END)
        return data

    def _read_compressed(self, member: Member) -> bytes:
        """A member of a compressed tar, read in 1 MiB blocks; refused (a
        :class:`WenetDataError`, kind ``"bad_member"``) once it has decompressed past
        ``max_member_ratio()`` times the compressed bytes read since it began."""
        f = self._tar.extractfile(member)
        ratio, start = max_member_ratio(), self._stream.pos
        chunks, got = [], 0
        while got < member.size:
            chunk = f.read(min(1 << 20, member.size - got))
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
            used = max(self._stream.pos - start, 1)
            if got > RATIO_FLOOR_BYTES and got > ratio * used:
                raise WenetDataError(
                    f"member decompresses to over {ratio:g}x the {used} compressed bytes "
                    f"read for it ({got} bytes so far; a decompression bomb? "
                    "WENET_LHOTSE_MAX_MEMBER_RATIO)", getattr(self._stream, "_source", None)
                    or "tar", member=member.name, kind="bad_member")
        return b"".join(chunks)

    def end_problem(self) -> Optional[Tuple[str, str]]:
        """``(message, kind)`` when the archive did not end with an end-of-archive
        (zero) block, else None; the stream has been read to its end."""
        if self._tar is None:
            return self._problem
        if getattr(self._tar.fileobj, "comptype", "tar") != "tar":
            return None  # compressed: a cut stream raises EOFError instead
        block = self._stream.block_at((self._base or 0) + self._tar.offset)
        if block is None or block == _ZERO_BLOCK:
            return None
        if len(block) < BLOCK:
            return "truncated tar (no end-of-archive block after the last member)", "truncated"
        return "invalid tar header after the last member read (corrupt tar)", "bad_tar"
