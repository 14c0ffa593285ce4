"""WeNet tar shards <-> lazy Lhotse ``CutSet``.

A shard list holds one tar per line: a local path (relative paths resolve
against the working directory when :func:`read_shard_list` is called), an
``http(s)://`` URL or ``pipe:CMD`` (see :mod:`wenet_lhotse.formats.streams`).
Each tar is streamed once, front to back (``tarfile`` mode ``r|*``: any
compression, no seeking). Members are grouped by key, the member name up to
its LAST dot (``a/b.c.wav`` -> key ``a/b.c``); one utterance's members are
contiguous:

* ``key.<audio>`` (flac, mp3, m4a, ogg, opus, wav, wma) -> an in-memory
  recording (``Recording.from_bytes``; only the header is parsed when reading);
* ``key.txt`` -> supervision text (UTF-8, stripped);
* ``key.speaker`` / ``key.lang`` -> supervision speaker / language (UTF-8, stripped);
* any other ``key.<field>`` -> ``cut.custom[field]``: a ``str`` when the bytes are
  UTF-8 (kept verbatim, not stripped), else the raw ``bytes`` (WeNet keeps bytes too).
  Bytes cannot go into a JSONL manifest or a raw list: decode or drop such fields
  before saving; :func:`write_wenet_shards` writes them back verbatim.

:func:`write_wenet_shards` writes the layout of WeNet's ``tools/make_shard_list.py``.
"""

from __future__ import annotations

import codecs
import io
import json
import logging
import os
import random
import tarfile
import zlib
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np
from lhotse import CutSet, Recording, SupervisionSegment
from lhotse.lazy import Dillable
from lhotse.utils import fastcopy

from wenet_lhotse.formats.common import (
    AUDIO_SUFFIXES,
    KeySet,
    audio_error_message,
    cut_extra_fields,
    cut_speaker_lang,
    cut_text,
    encode_pcm16_wav,
    whole_recording_bytes,
)
from wenet_lhotse.formats.errors import SkipReport, WenetDataError
from wenet_lhotse.formats.raw_list import Pathlike, as_path_list
from wenet_lhotse.formats.streams import atomic_output, is_local, local_path, open_input

logger = logging.getLogger(__name__)

_BLOCK = 512  # tar block size (bytes)


@dataclass(frozen=True)
class ShardEntry:
    """One tar of a shard list: its path/URL/pipe and where it was listed."""

    url: str
    list_file: Optional[str] = None
    line: Optional[int] = None

    @property
    def listed_at(self) -> str:
        return f" (listed at {self.list_file}:{self.line})" if self.list_file else ""


def read_shard_entries(
    paths: Union[Pathlike, Sequence[Pathlike]],
    strict: bool = True,
    skip_report: Optional[SkipReport] = None,
) -> List[ShardEntry]:
    """Read shard list file(s): one tar per non-empty line (LF or CRLF). Relative
    local paths are made absolute against the working directory."""
    entries = []
    for path in as_path_list(paths):
        try:
            with open(path, "rb") as f:
                lines = f.read().split(b"\n")
        except OSError as e:
            raise WenetDataError(f"cannot open shard list: {e}", path, kind="missing_file") from e
        for lineno, raw in enumerate(lines, 1):
            raw = raw.strip()
            if lineno == 1 and raw.startswith(codecs.BOM_UTF8):
                raw = raw[len(codecs.BOM_UTF8):]
            if not raw:
                continue
            try:
                name = raw.decode("utf-8")
            except UnicodeDecodeError:
                err = WenetDataError("line is not valid UTF-8", path, line=lineno, kind="encoding")
                if strict:
                    raise err from None
                (skip_report if skip_report is not None else SkipReport()).add(err)
                continue
            if is_local(name):
                name = os.path.abspath(local_path(name))
            entries.append(ShardEntry(name, str(path), lineno))
    return entries


class _TailReader(io.RawIOBase):
    """Counts the bytes read through it and keeps the last few reads, so that the
    block where ``tarfile`` stopped can be inspected afterwards (``tarfile`` ends
    silently on a truncated or invalid header)."""

    def __init__(self, raw) -> None:
        super().__init__()
        self._raw = raw
        self.pos = 0
        self._chunks: List[Tuple[int, bytes]] = []

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        data = self._raw.read(n)
        if data:
            self._chunks.append((self.pos, data))
            del self._chunks[:-3]
            self.pos += len(data)
        return data

    def readinto(self, b) -> int:
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)

    def block_at(self, offset: int) -> Optional[bytes]:
        """The bytes at [offset, offset + 512) (fewer at EOF), then read to the end
        (so that a pipe's exit status can be checked); None if no longer kept."""
        while self.pos < offset + _BLOCK and self.read(_BLOCK * 20):
            pass
        start = self._chunks[0][0] if self._chunks else self.pos
        block = None
        if offset >= start:
            block = b"".join(c for _, c in self._chunks)[offset - start: offset - start + _BLOCK]
        while self.read(1 << 16):  # end-of-archive padding: usually < 10 KiB
            pass
        return block

    def close(self) -> None:
        if not self.closed:
            try:
                self._raw.close()  # a pipe reports its command's failure here
            finally:
                super().close()

    def close_error(self) -> Optional[WenetDataError]:
        """Close, returning (not raising) the error a failed command/download reports."""
        try:
            self.close()
        except WenetDataError as e:
            return e
        return None


class LazyWenetShardIterator(Dillable):
    """Iterates the cuts of WeNet tar shards, each tar streamed once, in order or
    shuffled per epoch, optionally split across (rank, worker) so that every shard
    is read exactly once by all readers together. Picklable; no ``len()``.

    ``set_epoch(e)`` changes the shuffling (seed + epoch); with ``stateful_shuffle``
    the epoch also advances by one after each complete pass.
    """

    def __init__(
        self,
        shards: Sequence[Union[str, ShardEntry]],
        shuffle_shards: bool = False,
        seed: int = 0,
        epoch: int = 0,
        split_for_dataloading: bool = False,
        rank: Optional[int] = None,
        world_size: Optional[int] = None,
        worker_id: Optional[int] = None,
        num_workers: Optional[int] = None,
        strict: bool = True,
        skip_report: Optional[SkipReport] = None,
        check_duplicates: bool = True,
        stateful_shuffle: bool = False,
    ) -> None:
        explicit = (rank, world_size, worker_id, num_workers)
        if not split_for_dataloading and any(v is not None for v in explicit):
            raise ValueError(
                "rank/world_size/worker_id/num_workers need split_for_dataloading=True"
            )
        if not isinstance(seed, int):
            raise ValueError("seed must be an int: every reader must shuffle the same way")
        self.shards = [s if isinstance(s, ShardEntry) else ShardEntry(str(s)) for s in shards]
        self.shuffle_shards = shuffle_shards
        self.seed = seed
        self.epoch = epoch
        self.split_for_dataloading = split_for_dataloading
        self.rank, self.world_size = rank, world_size
        self.worker_id, self.num_workers = worker_id, num_workers
        self.strict = strict
        self.skip_report = skip_report if skip_report is not None else SkipReport()
        self.check_duplicates = check_duplicates
        self.stateful_shuffle = stateful_shuffle

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def assigned_shards(self) -> List[ShardEntry]:
        """The shards this reader reads now, in order: shuffled with ``seed + epoch``
        (the same permutation everywhere), then ``[rank::world_size][worker::num_workers]``.
        Rank/world size come from ``RANK``/``WORLD_SIZE`` or ``torch.distributed``, the
        worker from ``torch.utils.data.get_worker_info()``, unless given explicitly."""
        shards = list(self.shards)
        if self.shuffle_shards:
            random.Random(self.seed + self.epoch).shuffle(shards)
        if not self.split_for_dataloading:
            return shards
        from lhotse.shar.readers.utils import pytorch_worker_info

        rank, world, worker, nworkers = pytorch_worker_info()
        rank = rank if self.rank is None else self.rank
        world = world if self.world_size is None else self.world_size
        worker = worker if self.worker_id is None else self.worker_id
        nworkers = nworkers if self.num_workers is None else self.num_workers
        if not (0 <= rank < world and 0 <= worker < nworkers):
            raise ValueError(f"bad split: rank {rank}/{world}, worker {worker}/{nworkers}")
        return shards[rank::world][worker::nworkers]

    def __iter__(self) -> Iterator:
        seen = KeySet() if self.check_duplicates else None
        for entry in self.assigned_shards():
            yield from self._read_tar(entry, seen)
        if self.stateful_shuffle:
            self.epoch += 1  # next full pass reshuffles, as Lhotse's Shar reader does

    def _handle(self, err: WenetDataError) -> None:
        if self.strict:
            raise err
        self.skip_report.add(err)

    def _read_tar(self, entry: ShardEntry, seen: Optional[KeySet]) -> Iterator:
        name = entry.url
        try:
            stream = _TailReader(open_input(name))
        except WenetDataError as e:
            self._handle(WenetDataError(e.message + entry.listed_at, name, kind=e.kind))
            return
        key: Optional[str] = None
        group: Dict[str, Tuple[str, bytes]] = {}
        member: Optional[str] = None
        with stream:
            try:
                with tarfile.open(fileobj=stream, mode="r|*") as tar:
                    for info in tar:
                        if not info.isfile():
                            continue
                        member = info.name
                        data = tar.extractfile(info).read()
                        k, dot, suffix = member.rpartition(".")
                        if not dot or not k or "/" in suffix:
                            self._handle(WenetDataError(
                                "member name has no .suffix", name, member=member, kind="invalid"
                            ))
                            continue
                        if k != key:
                            if key is not None:
                                yield from self._emit(name, key, group, seen)
                            key, group = k, {}
                        if suffix in group:
                            self._handle(WenetDataError(
                                f"second member for key {k!r} with suffix .{suffix}",
                                name, member=member, kind="duplicate",
                            ))
                            continue
                        group[suffix] = (member, data)
                    problem = self._end_problem(tar, stream)
            except (tarfile.TarError, EOFError, zlib.error) as e:
                truncated = isinstance(e, EOFError) or "unexpected end" in str(e)
                what = "truncated tar" if truncated else f"unreadable tar ({e})"
                at = f" while reading member {member}" if member else ""
                # A failed command/download explains a broken tar better than tarfile does.
                self._handle(
                    stream.close_error()
                    or WenetDataError(
                        what + at, name, member=member, kind="truncated" if truncated else "bad_tar"
                    )
                )
                return  # the pending group is incomplete; nothing after it is reachable
            except WenetDataError as e:  # a download or command failed mid-stream
                stream.close_error()
                self._handle(e)
                return
            err = stream.close_error()
            if err is None and problem is not None:
                err = WenetDataError(problem[0], name, member=member, kind=problem[1])
            if err is not None:
                # The pending group may be complete (the tar was cut at a member
                # boundary): keep it when valid, and still report the tar.
                if key is not None and not self.strict:
                    yield from self._emit(name, key, group, seen)
                self._handle(err)
                return
            if key is not None:
                yield from self._emit(name, key, group, seen)

    @staticmethod
    def _end_problem(tar: tarfile.TarFile, stream: _TailReader) -> Optional[Tuple[str, str]]:
        """``(message, kind)`` when the archive did not end with an end-of-archive
        (zero) block: ``tarfile`` stops silently at a truncated or invalid header."""
        if getattr(tar.fileobj, "comptype", "tar") != "tar":
            return None  # compressed: a cut stream raises EOFError instead
        block = stream.block_at(tar.offset)
        if block is None or block == bytes(_BLOCK):
            return None
        if len(block) < _BLOCK:
            return "truncated tar (no end-of-archive block after the last member)", "truncated"
        return "invalid tar header after the last member read (corrupt tar)", "bad_tar"

    def _emit(
        self, tar: str, key: str, group: Dict[str, Tuple[str, bytes]], seen: Optional[KeySet]
    ) -> Iterator:
        try:
            yield self._make_cut(tar, key, group, seen)
        except WenetDataError as err:
            self._handle(err)

    @staticmethod
    def _decode(tar: str, member: str, data: bytes) -> str:
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise WenetDataError(
                f"not valid UTF-8 (byte {e.start})", tar, member=member, kind="encoding"
            ) from None

    def _make_cut(self, tar: str, key: str, group: Dict[str, Tuple[str, bytes]], seen):
        audio = [s for s in group if s in AUDIO_SUFFIXES]
        if not audio:
            member = next(iter(group.values()))[0]
            raise WenetDataError("no audio member for this key", tar, member=member,
                                 kind="unpaired")
        if "txt" not in group:
            raise WenetDataError("no .txt member for this key", tar, member=group[audio[0]][0],
                                 kind="unpaired")
        if len(audio) > 1:
            names = ", ".join(group[s][0] for s in audio)
            raise WenetDataError(f"several audio members: {names}", tar,
                                 member=group[audio[0]][0], kind="invalid")
        audio_member, audio_bytes = group[audio[0]]
        text = self._decode(tar, group["txt"][0], group["txt"][1]).strip()
        meta = {}
        custom = {}
        for suffix, (member, data) in group.items():
            if suffix in ("speaker", "lang"):
                meta[suffix] = self._decode(tar, member, data).strip()
            elif suffix != "txt" and suffix not in AUDIO_SUFFIXES:
                try:
                    custom[suffix] = data.decode("utf-8")
                except UnicodeDecodeError:
                    custom[suffix] = data
        try:
            recording = Recording.from_bytes(audio_bytes, recording_id=key)
        except Exception as e:
            why = audio_error_message(e, audio_bytes)
            raise WenetDataError(f"cannot read audio: {why}", tar, member=audio_member,
                                 kind="bad_audio") from None
        if recording.num_samples == 0:
            raise WenetDataError("audio has no samples", tar, member=audio_member,
                                 kind="bad_audio")
        if seen is not None and not seen.add(key):
            raise WenetDataError(f"duplicate key {key!r} (seen earlier in this input)", tar,
                                 member=audio_member, kind="duplicate")
        cut = recording.to_cut()
        sup = SupervisionSegment(
            id=key,
            recording_id=key,
            start=0.0,
            duration=cut.duration,
            channel=cut.channel,
            text=text,
            speaker=meta.get("speaker"),
            language=meta.get("lang"),
        )
        return fastcopy(cut, supervisions=[sup], custom=custom or None)


def read_shard_list(
    paths: Union[Pathlike, Sequence[Pathlike]],
    *,
    shuffle_shards: bool = False,
    seed: int = 0,
    epoch: int = 0,
    split_for_dataloading: bool = False,
    strict: bool = True,
    skip_report: Optional[SkipReport] = None,
    rank: Optional[int] = None,
    world_size: Optional[int] = None,
    worker_id: Optional[int] = None,
    num_workers: Optional[int] = None,
    check_duplicates: bool = True,
    stateful_shuffle: bool = False,
) -> CutSet:
    """Open WeNet shard list(s) as a lazy :class:`~lhotse.CutSet` of cuts with
    in-memory audio (see the module doc for the layout). The list files are read
    now; the tars when iterating.

    :param shuffle_shards: shuffle the tar order with ``random.Random(seed + epoch)``
        (change the epoch with ``cuts.data.set_epoch(e)``); cuts within a tar keep
        their order.
    :param split_for_dataloading: read only this reader's share of the tars:
        ``[rank::world_size][worker::num_workers]`` of the (shuffled) list, so all
        ranks x DataLoader workers together read every tar exactly once. Detected from
        ``RANK``/``WORLD_SIZE`` / ``torch.distributed`` and the DataLoader worker info;
        ``rank``, ``world_size``, ``worker_id``, ``num_workers`` override.
    :param strict: raise :class:`WenetDataError` naming tar and member on the first
        bad item; with False, log it, record it in ``skip_report`` and go on
        (a tar that cannot be opened or is cut short counts as one skipped item).
    :param check_duplicates: detect repeated keys among the tars this reader reads
        (32-64 bytes per key).
    :param stateful_shuffle: advance the epoch after each complete pass, so a loader
        that never calls ``set_epoch`` (WeNet's ``train.py``) still reshuffles (each
        DataLoader worker holds its own copy; all advance together).
    """
    report = skip_report if skip_report is not None else SkipReport()
    entries = read_shard_entries(paths, strict=strict, skip_report=report)
    return CutSet(
        LazyWenetShardIterator(
            entries,
            shuffle_shards=shuffle_shards,
            seed=seed,
            epoch=epoch,
            split_for_dataloading=split_for_dataloading,
            rank=rank,
            world_size=world_size,
            worker_id=worker_id,
            num_workers=num_workers,
            strict=strict,
            skip_report=report,
            check_duplicates=check_duplicates,
            stateful_shuffle=stateful_shuffle,
        )
    )


# ----------------------------------------------------------------------------- writer


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
            sr = cut.sampling_rate
            # Like make_shard_list.py: a whole audio file goes in byte for byte (here
            # WAV and FLAC); a segment, audio to resample, or audio held in memory (from
            # shards or Shar) is encoded as 16-bit WAV.
            from_file = cut.has_recording and cut.recording.sources[0].type == "file"
            whole = (whole_recording_bytes(cut) if from_file and resample_to in (None, sr)
                     else None)
            if whole is not None:
                audio, ext = whole
            else:
                samples = cut.load_audio()
                if resample_to is not None and sr != resample_to:
                    # The torch resampler our features use: Lhotse's cut.resample()
                    # needs torchaudio or scipy, neither of which the core depends on.
                    from wenet_lhotse.features.augment import resample

                    samples = np.stack([resample(ch, sr, resample_to) for ch in samples])
                    sr = resample_to
                audio, ext = encode_pcm16_wav(samples, sr), "wav"
            _add_member(tar, f"{key}.txt", (cut_text(cut) or "").encode("utf-8"))
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


def _chunks(cuts: Iterable, size: int) -> Iterator[List]:
    chunk: List = []
    for cut in cuts:
        chunk.append(cut)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def write_wenet_shards(
    cuts: Iterable,
    out_dir: Pathlike,
    shard_size: int = 1000,
    list_path: Optional[Pathlike] = None,
    *,
    resample_to: Optional[int] = None,
    num_workers: int = 1,
    prefix: str = "shards",
    extra_members: bool = True,
    progress: bool = False,
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
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    list_path = Path(list_path) if list_path is not None else out_dir / f"{prefix}.list"
    tar_paths: List[str] = []
    jobs = (
        (chunk, str((out_dir / f"{prefix}_{i:09d}.tar").resolve()))
        for i, chunk in enumerate(_chunks(cuts, shard_size))
    )
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(desc="shards", unit="tar")
    total = 0
    if num_workers <= 1:
        for chunk, tar_path in jobs:
            total += _write_one_shard(chunk, tar_path, resample_to, extra_members)
            tar_paths.append(tar_path)
            if bar is not None:
                bar.update(1)
    else:
        with ProcessPoolExecutor(num_workers) as pool:
            pending = []
            for chunk, tar_path in jobs:
                pending.append(
                    pool.submit(_write_one_shard, chunk, tar_path, resample_to, extra_members)
                )
                tar_paths.append(tar_path)
                if len(pending) >= 2 * num_workers:  # bound the cuts held in memory
                    total += pending.pop(0).result()
                    if bar is not None:
                        bar.update(1)
            for fut in pending:
                total += fut.result()
                if bar is not None:
                    bar.update(1)
    if bar is not None:
        bar.close()
    with atomic_output(list_path, "wb") as f:
        f.write("".join(p + "\n" for p in tar_paths).encode("utf-8"))
    logger.info("wrote %d utterances in %d shards, list %s", total, len(tar_paths), list_path)
    return list_path
