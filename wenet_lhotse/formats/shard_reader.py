"""WeNet tar shards -> lazy Lhotse ``CutSet`` (the writer is :mod:`.shard_writer`).

A shard list holds one tar per line: a local path (relative paths resolve
against the working directory when :func:`read_shard_list` is called), an
``http(s)://`` URL or ``pipe:CMD`` (see :mod:`wenet_lhotse.io.streams`).
Each tar is streamed once, front to back (any compression ``tarfile``'s mode
``r|*`` reads, no seeking; plain uncompressed tars through the faster
:mod:`~wenet_lhotse.formats.tar_members`, with the same results). Members are
grouped by key, the member name up to its LAST dot (``a/b.c.wav`` -> key ``a/b.c``);
one utterance's members are contiguous:

* ``key.<audio>`` (flac, mp3, m4a, ogg, opus, wav, wma) -> an in-memory
  recording (``Recording.from_bytes``'s manifest; only the header is parsed when
  reading, by :func:`~wenet_lhotse.formats.audio.recording_from_bytes`);
* ``key.txt`` -> supervision text (UTF-8, stripped as WeNet strips it; text with edge
  whitespace also kept verbatim in the supervision's ``custom["txt_verbatim"]``, which
  the Parquet writer stores back);
* ``key.speaker`` / ``key.lang`` -> supervision speaker / language (UTF-8, stripped);
* any other ``key.<field>`` -> ``cut.custom[field]``: a ``str`` when the bytes are
  UTF-8 (kept verbatim, not stripped), else the raw ``bytes`` (WeNet keeps bytes too).
  Bytes cannot go into a JSONL manifest or a raw list: decode or drop such fields
  before saving; :func:`~wenet_lhotse.formats.shard_writer.write_wenet_shards` writes
  them back verbatim.
"""

from __future__ import annotations

import logging
import random
import tarfile
import zlib
from typing import Dict, Iterator, List, Optional, Sequence, Tuple, Union

from lhotse import CutSet, SupervisionSegment
from lhotse.lazy import Dillable
from lhotse.utils import Pathlike

from wenet_lhotse.errors import WenetDataError, reraise_worker_death, short_error
from wenet_lhotse.formats.audio import recording_from_bytes
from wenet_lhotse.formats.checks import key_problem, max_member_bytes, member_problem
from wenet_lhotse.formats.keyset import KeySet
from wenet_lhotse.formats.layout import AUDIO_SUFFIXES
from wenet_lhotse.formats.shard_list import ShardEntry, read_shard_entries
from wenet_lhotse.formats.split import reader_share
from wenet_lhotse.formats.tar_members import TarMembers
from wenet_lhotse.io.policy import PolicyHolder, ReadPolicy
from wenet_lhotse.io.read_limits import ReadLimits
from wenet_lhotse.io.streams import TailReader, open_input

logger = logging.getLogger(__name__)

class LazyWenetShardIterator(PolicyHolder, Dillable):
    """Iterates the cuts of WeNet tar shards, each tar streamed once, in order or
    shuffled per epoch, optionally split across (rank, worker) so that every shard
    is read exactly once by all readers together. Picklable; no ``len()``.

    ``set_epoch(e)`` changes the shuffling (seed + epoch); with ``stateful_shuffle``
    the epoch also advances by one after each complete pass. How to read (strict or
    skip, ``pipe:``, URL protocols, member cap, network limits) is ``policy``.
    """

    #: Read tars with :class:`~wenet_lhotse.formats.tar_members.TarMembers`' fast path
    #: (False: all through ``tarfile``; same results, for tests and benchmarks).
    fast_tar: bool = True

    #: Record each member's data offset in the tar (``_offsets``, per tar read; None in
    #: a compressed tar): what :mod:`~wenet_lhotse.formats.tar_index` keeps.
    record_offsets: bool = False

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
        check_duplicates: bool = True,
        stateful_shuffle: bool = False,
        *,
        policy: Optional[ReadPolicy] = None,
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
        self.policy = (policy or ReadPolicy())
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
        return reader_share(shards, rank, world, worker, nworkers)

    def __iter__(self) -> Iterator:
        seen = KeySet() if self.check_duplicates else None
        for entry in self.assigned_shards():
            yield from self._read_tar(entry, seen)
        if self.stateful_shuffle:
            self.epoch += 1  # next full pass reshuffles, as Lhotse's Shar reader does

    def _open_input(self, name: str, limits: ReadLimits):
        """The tar's byte stream (a hook: the indexer fingerprints what it reads)."""
        return open_input(name, policy=self.policy.replace(limits=limits))

    def _handle(self, err: WenetDataError) -> None:
        self.policy.handle(err)

    def _read_tar(self, entry: ShardEntry, seen: Optional[KeySet]) -> Iterator:
        name = entry.url
        limits = self.policy.read_limits()  # None in the policy: the environment's, now
        cap = max_member_bytes(self.policy.max_member_bytes)
        try:
            stream = TailReader(self._open_input(name, limits),
                                member_deadline_s=limits.member_deadline_s, source=name)
        except WenetDataError as e:
            self._handle(WenetDataError(e.message + entry.listed_at, name, kind=e.kind))
            return
        key: Optional[str] = None
        group: Dict[str, Tuple[str, bytes]] = {}
        member: Optional[str] = None
        self._offsets: Dict[str, Optional[int]] = {}
        with stream:
            try:
                with TarMembers(stream, fast=self.fast_tar) as tar:
                    for info in tar:
                        if info.isdir():
                            continue
                        member = info.name
                        stream.start_member(member)
                        why = member_problem(info, cap)
                        if why is not None:
                            self._handle(WenetDataError(why, name, member=member,
                                                        kind="bad_member"))
                            if info.isreg() and info.sparse is None:
                                # Skipping it means reading what it claims (maybe to
                                # the end of a forged tar): nothing after it is read.
                                if key is not None and key != member.rpartition(".")[0]:
                                    yield from self._emit(name, key, group, seen)
                                stream.close_error()
                                return
                            continue
                        if self.record_offsets:
                            self._offsets[member] = tar.data_offset(info)
                        data = tar.read(info)
                        k, dot, suffix = member.rpartition(".")
                        if not dot or not k or "/" in suffix:
                            self._handle(WenetDataError(
                                "member name has no .suffix", name, member=member, kind="invalid"
                            ))
                            continue
                        unsafe = key_problem(k)
                        if unsafe is not None:
                            self._handle(WenetDataError(f"unsafe member name: {unsafe}", name,
                                                        member=member, kind="unsafe_key"))
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
                    problem = tar.end_problem()
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
                if e.member is None and member is not None:  # name where it broke off
                    e = WenetDataError(f"{e.message} (in or after member {member})", name,
                                       member=member, kind=e.kind)
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
        verbatim = self._decode(tar, group["txt"][0], group["txt"][1])
        text = verbatim.strip()  # WeNet strips; the bytes as stored go to the writers
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
            recording = recording_from_bytes(audio_bytes, recording_id=key)
        except Exception as e:
            reraise_worker_death(e)
            why = short_error(e, audio=audio_bytes)
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
            custom={"txt_verbatim": verbatim} if verbatim != text else None,
        )
        cut.supervisions = [sup]  # a new cut: set in place, not copied (fastcopy)
        cut.custom = custom or None
        return cut


def read_shard_list(
    paths: Union[Pathlike, Sequence[Pathlike]],
    *,
    shuffle_shards: bool = False,
    seed: int = 0,
    epoch: int = 0,
    split_for_dataloading: bool = False,
    rank: Optional[int] = None,
    world_size: Optional[int] = None,
    worker_id: Optional[int] = None,
    num_workers: Optional[int] = None,
    check_duplicates: bool = True,
    stateful_shuffle: bool = False,
    policy: Optional[ReadPolicy] = None,
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
    :param check_duplicates: detect repeated keys among the tars this reader reads
        (32-64 bytes per key).
    :param stateful_shuffle: advance the epoch after each complete pass, so a loader
        that never calls ``set_epoch`` (WeNet's ``train.py``) still reshuffles (each
        DataLoader worker holds its own copy; all advance together).
    :param policy: how to read, in one :class:`~wenet_lhotse.io.policy.ReadPolicy`:
        ``strict`` (raise :class:`WenetDataError` naming tar and member on the first
        bad item; with False, log it, record it in ``skip_report`` and go on -- a tar
        that cannot be opened or is cut short counts as one skipped item),
        whether ``pipe:CMD`` lines run (without the permission they are bad input of kind
        ``"refused"`` and nothing is run), ``max_member_bytes`` (largest tar member
        read; default ``$WENET_LHOTSE_MAX_MEMBER_BYTES`` or 1 GiB; larger, sparse, link
        and device members are bad input, kind ``"bad_member"``, never allocated),
        ``limits`` (network deadlines) and ``url_protocols``.
    """
    policy = (policy or ReadPolicy())
    entries = read_shard_entries(paths, policy=policy)
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
            check_duplicates=check_duplicates,
            stateful_shuffle=stateful_shuffle,
            policy=policy,
        )
    )


def read_one_tar(tar: Union[str, ShardEntry], *, check_duplicates: bool = True,
                 policy: Optional[ReadPolicy] = None) -> CutSet:
    """Lazy cuts (in-memory audio) of one WeNet tar shard (path, URL or ``pipe:``),
    streamed once, read as ``policy`` says."""
    policy = (policy or ReadPolicy())
    return CutSet(LazyWenetShardIterator([tar], check_duplicates=check_duplicates,
                                         policy=policy))
