"""Audio for the cuts of emitted batches only, by member offset in their tar:
:class:`SharAudioAttacher` finds a Shar cut's member in its ``recording.*.tar`` by
reading tar headers (data seeked over), then reads the member with one seek; an indexed
WeNet shard cut (:mod:`.indexed_shards`: ``custom["shard_tar"]``) knows its offset, and
the members a batch needs from one tar are read together, neighbours in one request
(:func:`~wenet_lhotse.formats.member_reads.read_members`; tars on object storage or
HTTP in parallel threads). Indexed audio goes through the same checked decoder as a
streamed tar (:func:`~wenet_lhotse.formats.audio.recording_from_bytes`), and must still
have the samples and rate the index recorded. Map-style loading reads metadata alone
(:class:`~.positioned.JsonlReader`, :class:`~.indexed_shards.IndexReader`), so restoring a
sampler never touches audio.
"""

from __future__ import annotations

import tarfile
import threading
from typing import Any, Dict, List, Optional, Tuple

from lhotse import CutSet
from lhotse.utils import fastcopy

from wenet_lhotse.errors import WenetDataError, reraise_worker_death, short_error
from wenet_lhotse.formats.audio import recording_from_bytes
from wenet_lhotse.formats.member_reads import REINDEX, read_members
from wenet_lhotse.io.policy import PolicyHolder, ReadPolicy
from wenet_lhotse.io.streams import is_local

#: ``custom`` keys of an indexed shard cut that locate its audio (see :mod:`.indexed_shards`).
SHARD_KEYS = ("shard_tar", "shard_member", "shard_offset", "shard_size", "shard_crc",
              "shard_window")

#: Threads reading the tars of one batch on object storage / HTTP.
REMOTE_THREADS = 16
#: Threads reading the members of one remote tar by their own ranges (window order).
MEMBER_THREADS = 8


class _TarScan:
    """Offsets of a tar's data members, found by reading headers only (member data is
    seeked over), as far into the tar as needed so far. The file is open only during
    :meth:`find` (a worker may touch thousands of tars). Plain ustar headers of regular
    files (what Lhotse's Shar writer produces for ordinary cut ids) are decoded here
    directly; from the first other header on (PAX/GNU long names, other member types)
    :mod:`tarfile` reads the rest."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.pos = 0  # offset of the next unread header
        self.done = False
        self.fallback = False
        self.index: Dict[str, Tuple[int, int, str]] = {}

    def _add(self, name: str, offset: int, size: int) -> None:
        base, dot, ext = name.rpartition(".")  # "<cut_id>.<ext>", as Path(name).stem
        if not dot or "/" in ext:
            base, ext = name, ""
        if ext not in ("json", "nometa", "nodata"):
            self.index[base] = (offset, size, name)

    def _fast_step(self, f) -> bool:
        """Decode one plain header; False when it is not one (or at the end)."""
        f.seek(self.pos)
        buf = f.read(512)
        if len(buf) < 512 or not buf.strip(b"\0"):
            self.done = True  # end of archive
            return False
        size_field = buf[124:136].split(b"\0", 1)[0].strip()
        if not (buf[156:157] in (b"0", b"\0") and buf[257:262] == b"ustar"
                and size_field.isdigit()):
            self.fallback = True
            return False
        name = buf[:100].split(b"\0", 1)[0]
        prefix = buf[345:500].split(b"\0", 1)[0]
        if prefix:
            name = prefix + b"/" + name
        size = int(size_field, 8)
        self._add(name.decode("utf-8"), self.pos + 512, size)
        self.pos += 512 + (size + 511) // 512 * 512
        return True

    def find(self, key: str) -> Optional[Tuple[int, int, str]]:
        if key in self.index or self.done:
            return self.index.get(key)
        with open(self.path, "rb") as f:
            while not self.fallback and key not in self.index and self._fast_step(f):
                pass
            if self.fallback and not self.done and key not in self.index:
                f.seek(self.pos)
                tf = tarfile.open(fileobj=f, mode="r:")
                while key not in self.index:
                    m = tf.next()
                    if m is None:
                        self.done = True
                        break
                    self._add(m.name, m.offset_data, m.size)
                    self.pos = tf.offset
        return self.index.get(key)


class SharAudioAttacher(PolicyHolder):
    """Attach Shar audio to metadata cuts: ``custom["shar_tar"]`` names the tar; the
    member ``<cut_id>.<ext>`` is located from the tar headers (read incrementally, data
    seeked over, remembered per process) and read with one seek. Thread-safe; a copy
    sent to a DataLoader worker starts with an empty index. A cut whose member is
    missing raises :class:`WenetDataError` naming the tar (``policy.strict``), or is
    left out and recorded in the policy's ``skip_report`` (the loader forwards it with
    the batch; a copy starts with an empty one). The policy also gives the member size
    cap, network limits and URL protocols of indexed shard reads."""

    def __init__(self, *,
                 policy: Optional[ReadPolicy] = None) -> None:
        self.policy = (policy or ReadPolicy())
        self._scans: Dict[str, _TarScan] = {}
        self._lock = threading.Lock()
        self._windows: Any = None  # WindowReads, made on the first windowed remote read

    def __getstate__(self) -> Dict[str, Any]:
        return {"policy": self.policy.replace(skip_report=None)}  # a report of its own

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__init__(policy=state["policy"])

    def _locate(self, tar: str, cut_id: str) -> Tuple[int, int, str]:
        with self._lock:
            scan = self._scans.get(tar)
            if scan is None:
                scan = self._scans[tar] = _TarScan(tar)
            found = scan.find(cut_id)
        if found is None:
            raise WenetDataError(f"no audio member for cut {cut_id!r}", tar, member=cut_id,
                                 kind="missing_audio")
        return found

    def _indexed(self, cuts: List[Any]) -> Dict[str, Any]:
        """``{cut id: cut with audio or WenetDataError}`` of indexed shard cuts."""
        by_tar: Dict[str, List[Any]] = {}
        for cut in cuts:
            by_tar.setdefault(cut.custom["shard_tar"], []).append(cut)

        def one_tar(tar: str) -> Dict[str, Any]:
            group = by_tar[tar]
            members = [(c.custom["shard_member"], c.custom["shard_offset"],
                        c.custom["shard_size"], c.custom.get("shard_crc")) for c in group]
            try:
                data = self._read(tar, group, members)
            except WenetDataError as err:
                return {c.id: err for c in group}
            return {c.id: _with_audio(c, tar, data[c.custom["shard_member"]]) for c in group}

        remote = [t for t in by_tar if not is_local(t)]
        out: Dict[str, Any] = {}
        for tar in by_tar:
            if is_local(tar):
                out.update(one_tar(tar))
        if remote:
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(min(REMOTE_THREADS, len(remote))) as pool:
                for got in pool.map(one_tar, remote):
                    out.update(got)
        return out

    def _read(self, tar: str, group: List[Any], members: List[Tuple[Any, ...]]
              ) -> Dict[str, Any]:
        """:func:`read_members` of ``tar``, from its local copy under the window order
        (:mod:`.window_reads`); what the copy lacks is read from the tar (named there)."""
        if is_local(tar) or "shard_window" not in group[0].custom:
            return read_members(tar, members, policy=self.policy)
        if self._windows is None:
            from wenet_lhotse.sources.window_reads import WindowReads

            self._windows = WindowReads(self.policy)
        where = self._windows.source(tar, group)
        data: Dict[str, Any] = {}
        if where != tar:
            try:
                data = read_members(where, members, policy=self.policy)
            except WenetDataError:
                data = {}  # the copy went away: read from the tar
        again = [m for m in members if not isinstance(data.get(m[0]), bytes)]
        if again:  # each member alone, its exact range (not 4 MiB blocks), in parallel:
            # the members of a copy let go over the keeper's budget (or restored after)
            from concurrent.futures import ThreadPoolExecutor

            def one(member: Tuple[Any, ...]) -> Dict[str, Any]:
                return read_members(tar, [member], gap=0, policy=self.policy, blocks=False)

            with ThreadPoolExecutor(min(MEMBER_THREADS, len(again))) as pool:
                for got in pool.map(one, again):
                    data.update(got)
        return data

    def __call__(self, cuts: CutSet) -> CutSet:
        from lhotse.shar.utils import fill_shar_placeholder

        cuts = list(cuts)
        indexed = [c for c in cuts if c.custom and "shard_offset" in c.custom]
        filled = self._indexed(indexed) if indexed else {}
        out = []
        for cut in cuts:
            if cut.id in filled and cut.custom and "shard_offset" in cut.custom:
                got = filled[cut.id]
                if isinstance(got, WenetDataError):
                    self.policy.handle(got)
                else:
                    out.append(got)
                continue
            tar = (cut.custom or {}).get("shar_tar")
            if tar is None or cut.recording is None or cut.recording.sources[0].type != "shar":
                out.append(cut)
                continue
            try:
                offset, size, name = self._locate(tar, cut.id)
                with open(tar, "rb") as f:
                    f.seek(offset)
                    data = f.read(size)
            except (OSError, tarfile.TarError) as err:
                self.policy.handle(WenetDataError(
                    f"cannot read audio of cut {cut.id!r}: {err}", tar, member=cut.id,
                    kind="missing_audio"))
                continue
            except WenetDataError as err:
                self.policy.handle(err)
                continue
            fill_shar_placeholder(cut.recording, data=data, tarpath=name)
            out.append(cut)
        return CutSet.from_cuts(out)


def _with_audio(cut: Any, tar: str, data: Any) -> Any:
    """``cut`` with the audio ``data`` (bytes) of its member, or the WenetDataError."""
    member = cut.custom["shard_member"]
    if isinstance(data, WenetDataError):
        return data
    try:
        rec = recording_from_bytes(data, recording_id=cut.recording.id)
    except Exception as e:
        reraise_worker_death(e)  # torch's killed-worker error is not this member's fault
        return WenetDataError(f"cannot read audio: {short_error(e, audio=data)}", tar,
                              member=member, kind="bad_audio")
    if (rec.num_samples, rec.sampling_rate) != (cut.recording.num_samples,
                                                cut.recording.sampling_rate):
        return WenetDataError(f"audio differs from the index ({rec.num_samples} samples at "
                              f"{rec.sampling_rate} Hz, indexed {cut.recording.num_samples} "
                              f"at {cut.recording.sampling_rate}); {REINDEX}", tar,
                              member=member, kind="stale_index")
    custom = {k: v for k, v in cut.custom.items() if k not in SHARD_KEYS}
    return fastcopy(cut, recording=rec, custom=custom or None)
