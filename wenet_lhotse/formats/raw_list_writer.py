"""Lhotse cuts -> WeNet raw ``data.list`` (the writer; :mod:`.raw_list` reads it).

One cut becomes one JSON line (UTF-8, not escaped) that :func:`~.raw_list.read_raw_list`
turns back into the same cut: ``key`` (cut id, checked like a reader checks it, since it
may become a file name), ``wav`` (the recording's one file or URL), ``txt`` (supervision
texts joined by a space), ``start``/``end`` (seconds, rounded to 1 us) only when the cut
does not cover its whole recording, ``speaker``/``lang`` from the supervisions, then
every field of ``cut.custom`` (except Lhotse's ``shard_origin``/``shar_epoch``).

A raw line can only point at one audio file: audio that is not one (in memory, as
from shards; a command; several files; transforms; mixed cuts; a channel subset) is
written to ``audio_dir`` as 16-bit PCM WAV (``<key>.wav``), or refused (ValueError
naming the cut) when no ``audio_dir`` is given. The list and each WAV are written
atomically (temp file + rename): a rerun overwrites, a killed run leaves no half file.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Iterable, Optional

from lhotse.utils import Pathlike

from wenet_lhotse.errors import WenetDataError
from wenet_lhotse.formats.audio import encode_pcm16_wav
from wenet_lhotse.formats.checks import check_key, text_problem
from wenet_lhotse.formats.layout import (
    cut_extra_fields,
    cut_speaker_lang,
    cut_text,
    is_file_or_remote,
    is_whole_recording,
    json_value,
)
from wenet_lhotse.io.streams import atomic_output

logger = logging.getLogger(__name__)


def _raw_wav_and_span(cut, audio_dir: Optional[Path], key: str):
    """``(wav path, start, end)`` for one cut; start/end are None when the cut covers
    its whole recording. Audio that a raw line cannot point at (in memory, a command,
    several files, transforms, mixed cuts, a channel subset) is written to
    ``audio_dir`` as 16-bit PCM WAV, or refused when there is none."""
    rec = getattr(cut, "recording", None)
    simple = (
        type(cut).__name__ in ("MonoCut", "MultiCut")
        and rec is not None
        and len(rec.sources) == 1
        and is_file_or_remote(rec.sources[0])
        and not rec.transforms
        and (rec.num_channels == 1 or cut.num_channels == rec.num_channels)
    )
    if simple:
        if is_whole_recording(cut):
            return rec.sources[0].source, None, None
        return rec.sources[0].source, round(cut.start, 6), round(cut.start + cut.duration, 6)
    if audio_dir is None:
        raise ValueError(
            f"cut {key!r}: its audio is not a single file on disk (e.g. in-memory audio "
            f"from shards); pass audio_dir= to write it out as WAV files"
        )
    rel = Path(key + ".wav")
    if rel.is_absolute() or ".." in rel.parts:
        raise ValueError(f"cut {key!r}: key cannot be used as a file name under audio_dir")
    out = audio_dir / rel
    with atomic_output(out) as f:
        f.write(encode_pcm16_wav(cut.load_audio(), cut.sampling_rate))
    return str(out.resolve()), None, None


def write_raw_list(
    cuts: Iterable,
    path: Pathlike,
    *,
    audio_dir: Optional[Pathlike] = None,
) -> Path:
    """Write cuts as a WeNet raw list (atomically: temp file + rename) and return its path.

    Each line: ``key`` (cut id), ``wav``, ``txt`` (supervision texts joined by a space),
    ``start``/``end`` (seconds, rounded to 1 us) only when the cut does not cover its
    whole recording, ``speaker``/``lang`` from the supervisions, then every field of
    ``cut.custom`` (except Lhotse's ``shard_origin``/``shar_epoch``). UTF-8, not escaped.

    :param audio_dir: where to write 16-bit PCM WAVs for cuts whose audio is not a
        plain file (in-memory shard audio, ...); without it such cuts raise ValueError.
    """
    path = Path(path)
    audio_root = Path(audio_dir) if audio_dir is not None else None
    n = 0
    with atomic_output(path, "wb") as f:
        for cut in cuts:
            f.write(raw_list_line(cut, str(path), audio_root))
            n += 1
    logger.info("wrote %d lines to %s", n, path)
    return path


def raw_list_line(cut, list_path: str, audio_dir: Optional[Path] = None) -> bytes:
    """One cut as a raw-list line (UTF-8 JSON, ending in a newline), as
    :func:`write_raw_list` writes it; ``list_path`` names the list in errors."""
    key = cut.id
    check_key(key, list_path)  # never written: it may become a file name later
    wav, start, end = _raw_wav_and_span(cut, audio_dir, key)
    obj = {"key": key, "wav": wav}
    text = cut_text(cut)
    if text is not None:
        obj["txt"] = text
    if start is not None:
        obj["start"], obj["end"] = start, end
    speaker, lang = cut_speaker_lang(cut)
    if speaker is not None:
        obj["speaker"] = speaker
    if lang is not None:
        obj["lang"] = lang
    for name, value in cut_extra_fields(cut).items():
        obj[name] = json_value(key, name, value)
    try:
        return json.dumps(obj, ensure_ascii=False).encode("utf-8") + b"\n"
    except UnicodeEncodeError:
        raise WenetDataError(f"cut {key!r}: {text_problem(obj)}", list_path,
                             kind="encoding") from None
