"""Lhotse cuts (manifest or Shar) -> WeNet raw ``data.list`` or WeNet tar shards.

A raw list can only point at audio files. Cuts whose audio lives in memory
(Shar, WeNet shards) or at a URL get their audio written to files first:
whole in-memory recordings are dumped byte for byte (Shar's FLAC stays FLAC,
no re-encoding); anything else is decoded and stored with
:func:`~wenet_lhotse.convert.lossless.encode_lossless`. Cuts that already point
at local files are written as they are.

Both exports run as tasks over chunks of the input (:func:`map_tasks`: inline, a
local process pool, or a Dask cluster): a raw-list task writes the audio files of
:data:`RAW_CHUNK` cuts and returns their lines; the calling process writes the list,
in input order, once, atomically. A task is pure and restartable: an audio file
already there and complete (same bytes for a copy, every sample decodable for an
encoding) is kept, so a rerun writes only the missing or damaged files.
"""

from __future__ import annotations

import hashlib
import io
import logging
from pathlib import Path
from typing import List, Optional, Tuple
from urllib.parse import quote

from lhotse import AudioSource, fastcopy
from lhotse.cut import Cut
from lhotse.utils import Pathlike

from wenet_lhotse.convert.executor import LiveSlots, map_tasks, open_cluster, scheduler_loss
from wenet_lhotse.convert.lossless import encode_lossless
from wenet_lhotse.formats.layout import is_file_or_remote, is_whole_recording
from wenet_lhotse.formats.raw_list_writer import raw_list_line
from wenet_lhotse.formats.shard_writer import write_wenet_shards
from wenet_lhotse.formats.split import chunked
from wenet_lhotse.io.outputs import OutputGuard, refuse_clobber
from wenet_lhotse.io.policy import ReadPolicy
from wenet_lhotse.io.streams import atomic_output
from wenet_lhotse.sources.open import open_cuts

logger = logging.getLogger(__name__)


def default_audio_dir(out_list: Pathlike) -> Path:
    """``data.list`` -> ``data_audio/`` next to it: where exported audio goes by default."""
    out_list = Path(out_list)
    return out_list.parent / f"{out_list.stem}_audio"


#: Cuts per task of a raw-list export (their audio files and lines).
RAW_CHUNK = 100

#: Longest exported audio file name (bytes), leaving room for a temporary-file suffix.
MAX_NAME_BYTES = 200


def audio_file_name(key: str, ext: str) -> str:
    """A file name for utterance ``key`` that is unique and safe (keys may contain ``/``
    and ``.``): the key percent-encoded, plus ``.ext``. A name over
    :data:`MAX_NAME_BYTES` keeps its first part and ends with a hash of the key."""
    name = quote(key, safe="-_.")
    if len(name) + 1 + len(ext) > MAX_NAME_BYTES:
        digest = hashlib.blake2b(key.encode("utf-8", "surrogatepass"),
                                 digest_size=8).hexdigest()
        name = f"{name[:MAX_NAME_BYTES - 18 - len(ext)]}-{digest}"
    return f"{name}.{ext}"


def _refuse_same(src: Pathlike, out: Optional[Pathlike]) -> None:
    refuse_clobber(out, [src])  # the output is the input, or lies inside it (a Shar dir)


def _needs_file(cut: Cut) -> bool:
    return not all(is_file_or_remote(s) for s in cut.recording.sources)


def _is_complete(path: Path, data: Optional[bytes], cut: Cut) -> bool:
    """True when ``path`` already holds this cut's audio: the same bytes when they are
    known (a copy), else a file whose samples all decode (rate, channels and length
    as the cut's). Writes are atomic, so a damaged file is one changed afterwards."""
    if not path.is_file():
        return False
    if data is not None:
        return path.stat().st_size == len(data) and path.read_bytes() == data
    import soundfile as sf

    try:
        with sf.SoundFile(str(path)) as f:
            if f.samplerate != cut.sampling_rate or f.frames != cut.num_samples:
                return False
            return len(f.read(dtype="float32", always_2d=True)) == cut.num_samples
    except (RuntimeError, sf.LibsndfileError, TypeError):
        return False


def materialize_audio(cut: Cut, audio_dir: Path, stats: Optional[List[int]] = None) -> Cut:
    """Return ``cut`` with its audio in a local file under ``audio_dir`` (written
    atomically; kept when already complete, see :func:`_is_complete`). In-memory whole
    recordings are copied byte for byte. ``stats[0]``/``stats[1]`` count the files
    written / kept."""
    import soundfile as sf

    src = cut.recording.sources[0]
    whole_in_memory = is_whole_recording(cut) and src.type == "memory"
    path = None
    if whole_in_memory:
        data: Optional[bytes] = bytes(src.source)
        fmt = sf.info(io.BytesIO(data)).format.lower()
        ext = {"wav": "wav", "flac": "flac", "ogg": "ogg", "mp3": "mp3"}.get(fmt, fmt)
        start = cut.start
        path = (audio_dir / audio_file_name(cut.id, ext)).absolute()
        done = _is_complete(path, data, cut)
    else:
        start, data = 0.0, None
        # the extension depends on the samples: look for what an earlier run wrote
        found = [p for p in ((audio_dir / audio_file_name(cut.id, e)).absolute()
                             for e in ("flac", "wav")) if _is_complete(p, None, cut)]
        done = bool(found)
        if found:
            path = found[0]
        else:
            data, ext = encode_lossless(cut.load_audio(), cut.sampling_rate)
            path = (audio_dir / audio_file_name(cut.id, ext)).absolute()
    if not done:
        with atomic_output(path) as f:
            f.write(data)
    if stats is not None:
        stats[1 if done else 0] += 1
    channels = cut.recording.channel_ids
    if not whole_in_memory:
        channels = cut.channel if isinstance(cut.channel, list) else [cut.channel]
    recording = fastcopy(
        cut.recording,
        sources=[AudioSource(type="file", channels=list(range(len(channels))), source=str(path))],
        channel_ids=list(range(len(channels))),
        transforms=None,
        num_samples=cut.num_samples if start == 0 else cut.recording.num_samples,
        duration=cut.duration if start == 0 else cut.recording.duration,
    )
    channel = 0 if len(channels) == 1 else list(range(len(channels)))
    return fastcopy(cut, recording=recording, start=start, channel=channel)


def _raw_chunk(job: Tuple[List, Path, str]) -> Tuple[List[bytes], int, int]:
    """One task: the chunk's lines, with the audio files of its cuts written (or
    kept), and how many files were written and kept. Items that are bytes already
    are the lines of cuts that need no file (made by the caller: no cut to ship)."""
    items, audio_dir, list_name = job
    stats = [0, 0]
    lines = [c if isinstance(c, bytes)
             else raw_list_line(materialize_audio(c, audio_dir, stats), list_name)
             for c in items]
    return lines, stats[0], stats[1]


def export_raw_list(
    src: Pathlike,
    out_list: Pathlike,
    *,
    audio_dir: Optional[Pathlike] = None,
    progress: bool = False,
    policy: Optional[ReadPolicy] = None,
    num_workers: int = 1,
    cluster: Optional[str] = None,
    chunk_size: int = RAW_CHUNK,
) -> Path:
    """Write a WeNet raw ``data.list`` from a cuts manifest, Shar directory or WeNet list.

    :param src: anything :func:`~wenet_lhotse.sources.open_cuts` opens.
    :param out_list: the list to write (atomically, by this process, once).
    :param audio_dir: where audio of in-memory/URL cuts is written
        (default :func:`default_audio_dir`; created only when needed).
    :param progress: show a tqdm bar (unit: utterances, moved as tasks complete).
    :param policy: how ``src`` is read (:class:`~wenet_lhotse.io.policy.ReadPolicy`:
        shell commands from the data, URL protocols, strict or skip).
    :param num_workers: local processes writing audio files (1: in this process).
    :param cluster: a Dask scheduler address: the audio files are written by its
        workers (which must see ``audio_dir``); the list is written here.
    :param chunk_size: cuts per task.

    The output does not depend on where it ran. Rerunning after an interruption
    keeps the complete audio files and rewrites the missing or damaged ones.
    """
    from tqdm.auto import tqdm

    _refuse_same(src, out_list)
    cuts, _ = open_cuts(src, policy=policy)
    cuts = OutputGuard(out_list).cuts(cuts)  # nor is it one of the cuts' audio files
    # absolute here: pool and cluster workers run in other directories
    adir = (Path(audio_dir) if audio_dir is not None else default_audio_dir(out_list)).absolute()
    name = str(out_list)
    jobs = (([c if _needs_file(c) else raw_list_line(c, name)
              for c in chunk], adir, name) for chunk in chunked(cuts, chunk_size))
    written = kept = lines = 0
    with tqdm(desc="export", unit="utt", disable=not progress) as bar, \
            atomic_output(out_list, "wb") as f:
        for _, (chunk_lines, w, k) in map_tasks(_raw_chunk, jobs, num_jobs=num_workers,
                                                 cluster=cluster):
            f.writelines(chunk_lines)
            written, kept, lines = written + w, kept + k, lines + len(chunk_lines)
            bar.update(len(chunk_lines))
    logger.info("wrote %d lines to %s; audio files: %d written, %d kept from an earlier run",
                lines, out_list, written, kept)
    return Path(out_list)


def export_shards(
    src: Pathlike,
    out_dir: Pathlike,
    *,
    shard_size: int = 1000,
    list_path: Optional[Pathlike] = None,
    num_workers: int = 1,
    progress: bool = False,
    cluster: Optional[str] = None,
    policy: Optional[ReadPolicy] = None,
) -> Path:
    """Write WeNet tar shards (``make_shard_list.py`` layout) and their list file.

    :param src: anything :func:`~wenet_lhotse.sources.open_cuts` opens.
    :param out_dir: directory for ``shards_*.tar``.
    :param shard_size: utterances per tar.
    :param list_path: the shard list to write (default ``out_dir/shards.list``).
    :param num_workers: processes encoding tars in parallel.
    :param cluster: a Dask scheduler address: tars are encoded on its workers (which
        must see ``out_dir``); the list is written here, once. A rerun keeps the tars
        that are already complete.
    :param policy: how ``src`` is read (:class:`~wenet_lhotse.io.policy.ReadPolicy`:
        shell commands from the data, URL protocols, strict or skip).
    :return: the shard list path.
    """
    from tqdm.auto import tqdm

    _refuse_same(src, list_path)
    cuts, _ = open_cuts(src, policy=policy)
    cuts = OutputGuard(list_path, option="-o").cuts(cuts)  # nor one of its audio files
    it = tqdm(cuts, desc="export", unit="utt", disable=not progress)
    if cluster:
        with open_cluster(cluster) as executor, scheduler_loss(executor, cluster):
            return write_wenet_shards(it, out_dir, shard_size=shard_size, list_path=list_path,
                                      num_workers=LiveSlots(executor), executor=executor)
    return write_wenet_shards(it, out_dir, shard_size=shard_size, list_path=list_path,
                              num_workers=num_workers)
