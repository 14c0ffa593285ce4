"""Lhotse cuts (manifest or Shar) -> WeNet raw ``data.list`` or WeNet tar shards.

A raw list can only point at audio files. Cuts whose audio lives in memory
(Shar, WeNet shards) or at a URL get their audio written to files first:
whole in-memory recordings are dumped byte for byte (Shar's FLAC stays FLAC,
no re-encoding); anything else is decoded and stored with
:func:`~wenet_lhotse.convert.lossless.encode_lossless`. Cuts that already point
at local files are written as they are.
"""

from __future__ import annotations

import hashlib
import io
import logging
from pathlib import Path
from typing import Iterator, Optional
from urllib.parse import quote

from lhotse import AudioSource, fastcopy
from lhotse.cut import Cut
from lhotse.utils import Pathlike

from wenet_lhotse.convert.executor import cluster_slots, open_cluster
from wenet_lhotse.convert.lossless import encode_lossless
from wenet_lhotse.formats.layout import is_whole_recording
from wenet_lhotse.formats.raw_list import write_raw_list
from wenet_lhotse.formats.shard_writer import write_wenet_shards
from wenet_lhotse.formats.streams import atomic_output, same_file
from wenet_lhotse.sources.open import open_cuts

logger = logging.getLogger(__name__)


def default_audio_dir(out_list: Pathlike) -> Path:
    """``data.list`` -> ``data_audio/`` next to it: where exported audio goes by default."""
    out_list = Path(out_list)
    return out_list.parent / f"{out_list.stem}_audio"


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
    if out is not None and same_file(src, out):
        raise ValueError(f"{out}: the output is the input itself; write it elsewhere")


def _needs_file(cut: Cut) -> bool:
    return any(s.type != "file" for s in cut.recording.sources)


def materialize_audio(cut: Cut, audio_dir: Path) -> Cut:
    """Return ``cut`` with its audio in a local file under ``audio_dir`` (written
    atomically). In-memory whole recordings are copied byte for byte."""
    import soundfile as sf

    src = cut.recording.sources[0]
    whole_in_memory = is_whole_recording(cut) and src.type == "memory"
    if whole_in_memory:
        data = bytes(src.source)
        fmt = sf.info(io.BytesIO(data)).format.lower()
        ext = {"wav": "wav", "flac": "flac", "ogg": "ogg", "mp3": "mp3"}.get(fmt, fmt)
        start = cut.start
    else:
        data, ext = encode_lossless(cut.load_audio(), cut.sampling_rate)
        start = 0.0
    path = (audio_dir / audio_file_name(cut.id, ext)).absolute()
    with atomic_output(path) as f:
        f.write(data)
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


def export_raw_list(
    src: Pathlike,
    out_list: Pathlike,
    *,
    audio_dir: Optional[Pathlike] = None,
    progress: bool = False,
    allow_pipe: bool = False,
) -> Path:
    """Write a WeNet raw ``data.list`` from a cuts manifest, Shar directory or WeNet list.

    :param src: anything :func:`~wenet_lhotse.sources.open_cuts` opens.
    :param out_list: the list to write (atomically).
    :param audio_dir: where audio of in-memory/URL cuts is written
        (default :func:`default_audio_dir`; created only when needed).
    :param progress: show a tqdm bar (unit: utterances).
    :param allow_pipe: run ``pipe:`` inputs and ``command`` audio sources of ``src``.
    """
    from tqdm.auto import tqdm

    _refuse_same(src, out_list)
    cuts, _ = open_cuts(src, allow_pipe=allow_pipe)
    adir = Path(audio_dir) if audio_dir is not None else default_audio_dir(out_list)

    def gen() -> Iterator[Cut]:
        for cut in tqdm(cuts, desc="export", unit="utt", disable=not progress):
            yield materialize_audio(cut, adir) if _needs_file(cut) else cut

    return write_raw_list(gen(), out_list)


def export_shards(
    src: Pathlike,
    out_dir: Pathlike,
    *,
    shard_size: int = 1000,
    list_path: Optional[Pathlike] = None,
    num_workers: int = 1,
    progress: bool = False,
    cluster: Optional[str] = None,
    allow_pipe: bool = False,
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
    :param allow_pipe: run ``pipe:`` inputs and ``command`` audio sources of ``src``.
    :return: the shard list path.
    """
    from tqdm.auto import tqdm

    _refuse_same(src, list_path)
    cuts, _ = open_cuts(src, allow_pipe=allow_pipe)
    it = tqdm(cuts, desc="export", unit="utt", disable=not progress)
    if cluster:
        with open_cluster(cluster) as executor:
            return write_wenet_shards(it, out_dir, shard_size=shard_size, list_path=list_path,
                                      num_workers=cluster_slots(executor), executor=executor)
    return write_wenet_shards(it, out_dir, shard_size=shard_size, list_path=list_path,
                              num_workers=num_workers)
