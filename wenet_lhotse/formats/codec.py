"""An audio file's format from its own bytes: :func:`audio_format`.

Used where audio bytes are stored as they are under a name that must say what they
are (a WeNet shard member ``key.<suffix>``, a Shar member): Parquet rows carry bytes
whose file name may be missing or wrong, so the signature decides and the name is a
hint only. The formats are WeNet's shard audio suffixes
(:data:`~wenet_lhotse.formats.layout.AUDIO_SUFFIXES`):

* ``wav``: ``RIFF``/``RF64``/``BW64`` with ``WAVE`` at byte 8;
* ``flac``: ``fLaC``;
* ``ogg`` / ``opus``: ``OggS`` whose first packet is a Vorbis (or FLAC, Speex) head, or
  ``OpusHead``;
* ``mp3``: an ID3v2 tag, or an MPEG audio Layer III frame sync (11 set bits);
* ``m4a``: an ISO media file (``ftyp`` at byte 4: M4A, MP4, AAC in MP4);
* ``wma``: an ASF header GUID.
"""

from __future__ import annotations

from typing import Optional

#: ASF (WMA) header object GUID.
_ASF = bytes.fromhex("3026b2758e66cf11a6d900aa0062ce6c")
#: File name suffixes that name the same format as a signature does.
_ALIASES = {"oga": "ogg", "mp4": "m4a", "aac": "m4a", "wave": "wav"}


def sniff_format(data: bytes) -> Optional[str]:
    """The format ``data`` starts like (see the module doc), or None."""
    head = bytes(data[:64])
    if head[:4] in (b"RIFF", b"RF64", b"BW64") and head[8:12] == b"WAVE":
        return "wav"
    if head[:4] == b"fLaC":
        return "flac"
    if head[:4] == b"OggS":
        return "opus" if b"OpusHead" in head else "ogg"
    if head[:3] == b"ID3":
        return "mp3"
    if len(head) >= 2 and head[0] == 0xFF and head[1] & 0xE0 == 0xE0:
        layer = (head[1] >> 1) & 3
        if layer == 1:  # 01: Layer III (00 is ADTS AAC, which WeNet has no suffix for)
            return "mp3"
    if head[4:8] == b"ftyp":
        return "m4a"
    if head[:16] == _ASF:
        return "wma"
    return None


def audio_format(data: bytes, hint: Optional[str] = None) -> Optional[str]:
    """The member suffix for ``data``: its signature's format; when the signature says
    nothing, the ``hint`` (a file name or suffix, e.g. the row's ``audio.path``) if it
    names one of the formats; else None (the caller names the item as unrecognised).

    >>> audio_format(b"OggS" + bytes(24) + b"OpusHead"), audio_format(b"ID3\\x04")
    ('opus', 'mp3')
    >>> audio_format(b"\\x00" * 8, "clip.WAV"), audio_format(b"\\x00" * 8, "x.txt")
    ('wav', None)
    """
    found = sniff_format(data)
    if found is not None or not hint:
        return found
    suffix = str(hint).rsplit(".", 1)[-1].lower()
    suffix = _ALIASES.get(suffix, suffix)
    return suffix if suffix in ("wav", "flac", "ogg", "opus", "mp3", "m4a", "wma") else None
