"""The WeNet item layout on a Lhotse cut, in one place.

A WeNet item (a raw-list line or a shard's group of tar members) has ``key``,
``wav``, ``txt`` and optional ``start``/``end``/``speaker``/``lang`` plus any other
fields. On a cut: ``cut.id == key``; one supervision over the cut carries
``text``/``speaker``/``language``; every other field is kept in ``cut.custom``.
The readers build cuts that way; the writers and the dataset read them back with
the helpers below.
"""

from __future__ import annotations

import json
from typing import Any, Dict, Optional, Tuple

from wenet_lhotse.errors import WenetDataError
from wenet_lhotse.formats.audio import sniff_container
from wenet_lhotse.formats.codec import audio_format

#: Audio member suffixes WeNet accepts in shards (``processor.AUDIO_FORMAT_SETS``).
AUDIO_SUFFIXES = frozenset({"flac", "mp3", "m4a", "ogg", "opus", "wav", "wma"})

#: WeNet item fields that map onto the cut itself; every other field goes to ``cut.custom``.
CORE_FIELDS = frozenset({"key", "wav", "txt", "start", "end", "speaker", "lang"})

#: Entries Lhotse itself puts into ``cut.custom`` (Shar readers, samplers): never exported.
LHOTSE_INTERNAL_CUSTOM = frozenset({"shard_origin", "shar_epoch", "dataloading_info"})


def cut_source(cut) -> str:
    """Where a cut's audio lives, for error messages: the recording's file path or URL
    (or command), ``in-memory audio of recording 'id'`` for shard/Shar audio held in
    memory, else ``cut 'id'``."""
    rec = getattr(cut, "recording", None)
    if rec is not None and rec.sources:
        src = rec.sources[0]
        if src.type == "memory":
            return f"in-memory audio of recording {rec.id!r}"
        if src.type in ("file", "url", "command"):
            return str(src.source)
    return f"cut {cut.id!r}"


def cut_text(cut, *, single: bool = False, required: bool = False) -> Optional[str]:
    """The WeNet ``txt`` of a cut.

    :param single: the dataset's reading: the text of the cut's one supervision; a cut
        with several raises :class:`WenetDataError` (a WeNet utterance has exactly one
        transcript). Otherwise (the writers) the supervisions' texts joined by a space.
    :param required: raise :class:`WenetDataError` when there is no text (else None).
    """
    sups = cut.supervisions
    if single and len(sups) > 1:
        raise WenetDataError(
            f"cut {cut.id!r} has {len(sups)} supervisions; a WeNet utterance has exactly one "
            "(split long cuts with cut.trim_to_supervisions() first)",
            cut_source(cut), kind="supervisions")
    texts = [s.text for s in sups if s.text is not None]
    text = " ".join(texts) if texts else None
    if text is None and required:
        raise WenetDataError(
            f"cut {cut.id!r} has no transcript (supervision text); training and cv need one "
            "(use split='infer' for unlabeled audio)", cut_source(cut), kind="missing_text")
    return text


def cut_speaker_lang(cut):
    """``(speaker, lang)`` from the first supervision that has each, else None."""
    speaker = next((s.speaker for s in cut.supervisions if s.speaker is not None), None)
    lang = next((s.language for s in cut.supervisions if s.language is not None), None)
    return speaker, lang


def cut_extra_fields(cut) -> Dict[str, Any]:
    """The extra (non-core) WeNet fields stored in ``cut.custom``, without Lhotse's own
    bookkeeping entries and without anything that would shadow a core field."""
    custom = getattr(cut, "custom", None) or {}
    return {
        k: v
        for k, v in custom.items()
        if k not in LHOTSE_INTERNAL_CUSTOM and k not in CORE_FIELDS
    }


def json_value(cut_id: str, name: str, value: Any) -> Any:
    """Check that a custom field can be written as JSON; a clear error otherwise."""
    if isinstance(value, (bytes, bytearray)):
        raise ValueError(
            f"cut {cut_id!r}: custom field {name!r} holds bytes, which a JSON list cannot "
            f"store; drop it or decode it to str first"
        )
    try:
        json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError) as e:
        raise ValueError(f"cut {cut_id!r}: custom field {name!r} is not JSON: {e}") from e
    return value


def is_whole_recording(cut) -> bool:
    """True when the cut is exactly its whole recording: one audio source, no
    transforms, starting at 0, every sample and every channel."""
    rec = getattr(cut, "recording", None)
    return not (rec is None or len(rec.sources) != 1 or rec.transforms
                or cut.start != 0 or cut.num_samples != rec.num_samples
                or rec.num_channels != cut.num_channels)


def is_file_or_remote(source) -> bool:
    """True for an ``AudioSource`` that a raw list's ``wav`` can name: a file, an
    ``http(s)://`` URL or an object-storage URL (``s3://``, ...)."""
    from wenet_lhotse.io.remote_audio import is_audio_url

    return source.type == "file" or source.type == "url" and is_audio_url(str(source.source))


def whole_recording_bytes(cut, any_format: bool = False) -> Optional[Tuple[bytes, str]]:
    """``(encoded bytes, extension)`` of the cut's audio when the cut is exactly its
    whole recording (:func:`is_whole_recording`), stored in one WAV or FLAC file or
    in-memory blob (or at a URL); else None. These bytes can be stored
    as they are. ``any_format``: also OGG/Vorbis, Opus, MP3, M4A, WMA
    (:func:`~wenet_lhotse.formats.codec.audio_format`)."""
    if not is_whole_recording(cut):
        return None
    src = cut.recording.sources[0]
    if src.type == "memory":
        data = bytes(src.source)
    elif src.type == "file":
        with open(src.source, "rb") as f:
            data = f.read()
    elif is_file_or_remote(src):
        from wenet_lhotse.io.remote_audio import read_remote_bytes

        data = read_remote_bytes(src.source)
    else:
        return None
    ext = audio_format(data) if any_format else sniff_container(data[:12])
    return (data, ext) if ext else None
