"""Lhotse cuts -> WeNet tar shards, laid out as WeNet's ``tools/make_shard_list.py``
writes them (see :func:`write_wenet_shards`); the reader is :mod:`.shard_reader`."""

from __future__ import annotations

import functools
import io
import json
import logging
import os
import tarfile
from concurrent.futures import Executor
from pathlib import Path
from typing import Callable, Iterable, List, Optional, Tuple, Union

import numpy as np
from lhotse.utils import Pathlike

from wenet_lhotse.errors import WenetDataError
from wenet_lhotse.formats.audio import encode_pcm16_wav, resample
from wenet_lhotse.formats.checks import check_key
from wenet_lhotse.formats.layout import (
    AUDIO_SUFFIXES,
    cut_extra_fields,
    cut_speaker_lang,
    cut_text,
    is_file_or_remote,
    whole_recording_bytes,
)
from wenet_lhotse.formats.split import chunked
from wenet_lhotse.io.parallel import map_bounded
from wenet_lhotse.io.streams import atomic_output

logger = logging.getLogger(__name__)


def _field_bytes(key: str, name: str, value) -> bytes:
    if "." in name or "/" in name or name in AUDIO_SUFFIXES or not name:
        raise ValueError(f"cut {key!r}: custom field {name!r} cannot be a tar member suffix")
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    return json.dumps(value, ensure_ascii=False).encode("utf-8")


def _add_member(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)  # mtime 0, mode 0644, as make_shard_list.py
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def _write_one_shard(
    cuts: List, tar_path: str, resample_to: Optional[int], extras: bool = True
) -> int:
    """Write one tar; returns the number of utterances."""
    with atomic_output(tar_path, "wb") as f, tarfile.open(fileobj=f, mode="w") as tar:
        for cut in cuts:
            key = cut.id
            check_key(key, tar_path)  # would become a member name, maybe "../x" on extraction
            sr = cut.sampling_rate
            # Like make_shard_list.py: a whole audio file goes in byte for byte (here
            # WAV and FLAC); a segment, audio to resample, or audio held in memory (from
            # shards or Shar) is encoded as 16-bit WAV.
            from_file = cut.has_recording and is_file_or_remote(cut.recording.sources[0])
            whole = (whole_recording_bytes(cut) if from_file and resample_to in (None, sr)
                     else None)
            if whole is not None:
                audio, ext = whole
            else:
                samples = cut.load_audio()
                if resample_to is not None and sr != resample_to:
                    # The torch resampler our features use: Lhotse's cut.resample()
                    # needs torchaudio or scipy, neither of which the core depends on.
                    samples = np.stack([resample(ch, sr, resample_to) for ch in samples])
                    sr = resample_to
                audio, ext = encode_pcm16_wav(samples, sr), "wav"
            try:
                text = (cut_text(cut) or "").encode("utf-8")
            except UnicodeEncodeError:
                raise WenetDataError(f"cut {key!r}: its text holds a lone surrogate (not "
                                     "valid Unicode)", tar_path, kind="encoding") from None
            _add_member(tar, f"{key}.txt", text)
            _add_member(tar, f"{key}.{ext}", audio)
            if not extras:
                continue
            speaker, lang = cut_speaker_lang(cut)
            if speaker is not None:
                _add_member(tar, f"{key}.speaker", speaker.encode("utf-8"))
            if lang is not None:
                _add_member(tar, f"{key}.lang", lang.encode("utf-8"))
            for name, value in cut_extra_fields(cut).items():
                _add_member(tar, f"{key}.{name}", _field_bytes(key, name, value))
    return len(cuts)


def _tar_is_complete(tar_path: str, keys: List[str]) -> bool:
    """True when ``tar_path`` exists, reads to its end, and holds exactly ``keys``
    (walks the headers only, seeking over the data)."""
    if not os.path.isfile(tar_path):
        return False
    try:
        with tarfile.open(tar_path, "r:") as tar:
            found = {m.name.rsplit(".", 1)[0] for m in tar}
    except (OSError, EOFError, tarfile.TarError):
        return False
    return found == set(keys)


def _write_job(job: Tuple[List, str], resample_to: Optional[int], extras: bool) -> int:
    cuts, tar_path = job
    if _tar_is_complete(tar_path, [c.id for c in cuts]):
        return len(cuts)  # a rerun: written before (tars are written atomically)
    return _write_one_shard(cuts, tar_path, resample_to, extras)


def write_wenet_shards(
    cuts: Iterable,
    out_dir: Pathlike,
    shard_size: int = 1000,
    list_path: Optional[Pathlike] = None,
    *,
    resample_to: Optional[int] = None,
    num_workers: Union[int, Callable[[], int]] = 1,
    prefix: str = "shards",
    extra_members: bool = True,
    progress: bool = False,
    executor: Union[str, Executor] = "process",
) -> Path:
    """Write cuts as WeNet shards, laid out as WeNet's ``tools/make_shard_list.py``
    does, and return the shard list file (one absolute tar path per line).

    Tars ``{out_dir}/{prefix}_000000000.tar``, ... of ``shard_size`` utterances; per
    utterance ``key.txt`` (supervision texts joined by a space) then the audio: a cut
    that is a whole WAV or FLAC file is copied byte for byte (``key.wav`` /
    ``key.flac``, as ``make_shard_list.py`` copies files), anything else (segments,
    other formats, in-memory audio, resampling) becomes ``key.wav`` (16-bit PCM, all
    channels); then ``key.speaker``,
    ``key.lang`` and ``key.<field>`` for each ``cut.custom`` field (str as UTF-8,
    bytes verbatim, other values as JSON text, so they read back as str); members
    have mtime 0. Each tar and the list are written atomically (temp + rename).

    :param resample_to: resample to this rate (Hz) first; None keeps each cut's rate
        (``make_shard_list.py`` resamples segments to 16000 by default and copies whole
        files as they are).
    :param extra_members: False writes only ``key.txt`` and ``key.wav``, nothing else.
    :param num_workers: processes encoding shards in parallel (1: in this process).
    :param progress: show a tqdm bar (shards written).
    :param executor: or an Executor with ``num_workers`` slots to run the tar writers on
        (e.g. a Dask cluster's; it must see ``out_dir``); ``num_workers`` may then be a
        function giving the slots there are now (see ``map_bounded``).

    Restartable: a tar already holding exactly its utterances (from an earlier run with
    the same input and ``shard_size``) is kept, not rewritten.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    list_path = Path(list_path) if list_path is not None else out_dir / f"{prefix}.list"
    tar_paths: List[str] = []
    jobs = (
        (chunk, str((out_dir / f"{prefix}_{i:09d}.tar").resolve()))
        for i, chunk in enumerate(chunked(cuts, shard_size))
    )
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(desc="shards", unit="tar")
    total = 0
    write = functools.partial(_write_job, resample_to=resample_to, extras=extra_members)
    for (_, tar_path), n in map_bounded(write, jobs, num_workers, executor=executor):
        total += n
        tar_paths.append(tar_path)
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    with atomic_output(list_path, "wb") as f:
        f.write("".join(p + "\n" for p in tar_paths).encode("utf-8"))
    logger.info("wrote %d utterances in %d shards, list %s", total, len(tar_paths), list_path)
    return list_path
