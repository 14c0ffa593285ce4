"""``nemo``: a NeMo ASR manifest, read lazily as cuts (``type: nemo``, or detected).

A NeMo manifest has one JSON object per line::

    {"audio_filepath": "wavs/a.wav", "duration": 3.2, "text": "...", "offset": 1.5,
     "lang": "en"}

and is detected by ``audio_filepath`` in its first JSON line. Each line becomes one cut:

* the recording is ``audio_filepath``, its header probed as a raw list's is
  (:func:`~wenet_lhotse.formats.audio.probe_recording`; URLs in range requests through
  :mod:`~wenet_lhotse.io.remote_audio`); a relative path resolves against the
  manifest's directory, as NeMo resolves it (or ``wav_root`` when given);
* with ``offset`` (seconds), the cut is the window ``[offset, offset + duration)``;
  without it, the whole recording, as NeMo's Lhotse adapter reads it (the header's
  duration wins over a rounded ``duration``);
* one supervision: ``text``, ``lang``; every other field goes to ``cut.custom``;
* the cut id is ``audio_filepath`` without its extension (``wavs/spk1/a``; an absolute
  path, a URL or one with ``..``: the file's stem and a hash of the path, ``a-1f2e3d4c``),
  so ``x/a.wav`` and ``y/a.wav`` are two ids (NeMo's stem alone collides), with
  ``-<offset ms>-<duration ms>`` for a window (a repeated id is a bad line, as in a raw
  list).

A bad line (invalid JSON, a missing or ill-typed field, missing or unreadable audio, a
window past the end) is a one-line :class:`~wenet_lhotse.errors.WenetDataError` naming
``file:line``; the read policy decides whether it stops the read (strict) or is skipped
and counted. The checks after the field translation are the raw list's own
(:class:`~wenet_lhotse.formats.raw_list.LazyWenetRawListIterator`, which this reader
extends). Map-style loading holds the cuts in memory, as for raw lists.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
from typing import Any, Callable, Optional, Sequence

from lhotse import CutSet

from wenet_lhotse.errors import WenetDataError
from wenet_lhotse.formats.checks import is_finite_number, key_problem
from wenet_lhotse.formats.raw_list import LazyWenetRawListIterator
from wenet_lhotse.io.policy import ReadPolicy
from wenet_lhotse.io.remote import is_remote
from wenet_lhotse.io.remote_audio import is_audio_url
from wenet_lhotse.sources.kinds.base import InputKind
from wenet_lhotse.sources.kinds.sniff import NO, SURE, FirstLine

#: NeMo's fields this reader translates; the others go to ``cut.custom``.
NEMO_FIELDS = ("audio_filepath", "duration", "text", "offset", "lang")


class LazyNeMoManifest(LazyWenetRawListIterator):
    """The cuts of one or more NeMo manifests, line by line (see the module doc)."""

    def __init__(self, paths: Sequence[str], policy: ReadPolicy,
                 wav_root: Optional[str] = None) -> None:
        super().__init__(paths, wav_root=wav_root, policy=policy)
        self.given_root = wav_root is not None

    def _item(self, obj: dict, path: str, fail: Callable[..., WenetDataError]) -> dict:
        """The raw-list item of one NeMo line (the raw list's checks follow)."""
        audio = obj.get("audio_filepath")
        if not isinstance(audio, str) or not audio:
            raise fail("missing 'audio_filepath'" if audio is None else
                       "'audio_filepath' must be a non-empty string",
                       "missing_field" if audio is None else "invalid")
        for name in ("duration", "offset"):
            value = obj.get(name)
            if value is not None and (not is_finite_number(value) or value < 0):
                raise fail(f"{name!r} must be a number of seconds >= 0, got {value!r}",
                           "invalid")
        if obj.get("duration") is None:
            raise fail("missing 'duration'", "missing_field")
        for name in ("text", "lang"):
            if obj.get(name) is not None and not isinstance(obj[name], str):
                raise fail(f"{name!r} must be a string", "invalid")
        line = {"key": self._key(audio, obj), "wav": self._audio(audio, path),
                "txt": obj.get("text"), "lang": obj.get("lang")}
        if obj.get("offset") is not None:
            line.update(start=obj["offset"], end=obj["offset"] + obj["duration"])
        line.update({k: v for k, v in obj.items() if k not in NEMO_FIELDS})
        return {k: v for k, v in line.items() if v is not None}

    def _audio(self, audio: str, manifest: str) -> str:
        """An absolute path or URL; a relative one against the manifest's directory."""
        if is_audio_url(audio) or os.path.isabs(audio) or self.given_root:
            return audio  # (relative with wav_root: the raw list's rule joins it)
        if is_remote(manifest):
            return posixpath.join(posixpath.dirname(manifest), audio)
        return os.path.join(os.path.dirname(manifest), audio)

    @staticmethod
    def _key(audio: str, obj: dict) -> str:
        stem = _audio_id(audio)
        if obj.get("offset") is None:
            return stem
        return f"{stem}-{round(obj['offset'] * 1000)}-{round(obj['duration'] * 1000)}"


def _audio_id(audio: str) -> str:
    """The id part an ``audio_filepath`` gives: the path as written without its extension
    when it is a safe relative key (``wavs/spk1/a.wav`` -> ``wavs/spk1/a``), else the
    file's stem and a hash of the whole path (``a-1f2e3d4c``): ids unique by construction,
    where the stem alone made ``x/a.wav`` and ``y/a.wav`` collide."""
    base, _ = posixpath.splitext(audio.rstrip("/"))
    if "://" not in audio and key_problem(base) is None:
        return base
    stem = os.path.splitext(posixpath.basename(audio.rstrip("/")))[0]
    digest = hashlib.blake2b(audio.encode("utf-8", "surrogatepass"), digest_size=4).hexdigest()
    return f"{stem}-{digest}"


class NeMoKind(InputKind):
    name = "nemo"
    description = "NeMo ASR manifest (JSON lines with audio_filepath, duration, text)"

    def sniff(self, first: FirstLine) -> int:
        record = first.record
        return SURE if record is not None and "audio_filepath" in record else NO

    def open(self, paths: Sequence[str], policy: ReadPolicy, *, wav_root: Any = None,
             **_: Any) -> CutSet:
        for path in paths:
            if not is_remote(path) and not os.path.isfile(path):
                raise WenetDataError("no such manifest file", path, kind="missing_file")
        return CutSet(LazyNeMoManifest(paths, policy,
                                       None if wav_root is None else str(wav_root)))


KIND = NeMoKind()
