"""The shard index written by a streamed first epoch (``lhotse_conf.index_first_pass``).

While a streamed epoch reads its tars, :class:`RecordingShardIterator` (the shard
reader itself) builds each tar's index rows from the bytes it reads anyway -- the same
rows :func:`~wenet_lhotse.formats.tar_index.index_tar` makes (one row builder,
:meth:`TarRows.add`; the same per-tar duplicate check, the same bad items, the same
fingerprint) -- and, when it has read a tar to its end, writes them atomically as one
fragment: ``<index path>.first-pass/<line in the list>.json`` (JSON: loading it runs no
code). A tar the reader left before its end (the epoch stopped, strict mode raised) has
no fragment; neither has a compressed tar nor a ``pipe:`` line (no offsets).
:meth:`FirstPass.assemble` writes the index of a list in list order from the fragments,
indexing a tar without one itself (:func:`~wenet_lhotse.formats.tar_index.index_entry`),
through :class:`~wenet_lhotse.formats.index_writer.IndexWriter` -- the bytes
``wenet-lhotse index`` writes for the same list and tars -- and removes the fragments.
A fragment is used only while it parses as rows and still matches its line (the same
URL; a local tar unchanged in size, mtime and ctime): else its tar is indexed again.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
import zlib
from typing import Any, Dict, Iterator, List, Optional, Sequence

from lhotse import CutSet

from wenet_lhotse.errors import SkippedItem, WenetDataError
from wenet_lhotse.formats.index_writer import IndexWriter
from wenet_lhotse.formats.keyset import KeySet
from wenet_lhotse.formats.layout import AUDIO_SUFFIXES
from wenet_lhotse.formats.shard_index import index_path
from wenet_lhotse.formats.shard_list import ShardEntry, read_shard_entries
from wenet_lhotse.formats.shard_reader import LazyWenetShardIterator
from wenet_lhotse.formats.tar_index import FingerprintedStream, TarRows, fingerprint, index_entry
from wenet_lhotse.io.policy import ReadPolicy
from wenet_lhotse.io.streams import is_local, is_pipe, local_path

#: Directory of a list's fragments: its index path plus this.
FRAGMENTS = ".first-pass"


class FirstPass:
    """Where the fragments of shard lists go and how they become their indexes.
    Picklable (paths only): DataLoader workers write through their copy.

    :param cache_dir: ``lhotse_conf.shard_index`` when a directory, else None (beside
        the list)."""

    def __init__(self, cache_dir: Optional[str] = None) -> None:
        self.cache_dir = cache_dir

    def index_path(self, list_file: str) -> str:
        return index_path(list_file, self.cache_dir)

    def _fragment(self, entry: ShardEntry) -> str:
        return os.path.join(self.index_path(str(entry.list_file)) + FRAGMENTS,
                            f"{entry.line}.json")

    def write(self, entry: ShardEntry, rows: TarRows) -> None:
        """Keep the rows of the tar listed as ``entry``: written to a temporary file,
        renamed (atomic; not fsynced -- a fragment lost in a crash, or one that does
        not parse, only means that tar is indexed again before epoch 1)."""
        if entry.list_file is None or entry.line is None:
            return
        path = self._fragment(entry)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump({fld.name: getattr(rows, fld.name) for fld in dataclasses.fields(rows)},
                          f, ensure_ascii=False)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise

    def read(self, entry: ShardEntry) -> Optional[TarRows]:
        """The rows recorded for ``entry``; None when there are none or they may be stale
        (another URL on that line, a local tar changed since: size, mtime or ctime), or
        the file does not parse as rows: the tar is then indexed again."""
        try:
            with open(self._fragment(entry), encoding="utf-8") as f:
                obj = json.load(f)
            obj["bad"] = [tuple(b) for b in obj["bad"]]
            rows = TarRows(**obj)
        except (OSError, ValueError, TypeError, KeyError, AttributeError):
            return None
        if rows.url != entry.url:
            return None
        if is_local(rows.url):
            try:
                st = os.stat(local_path(rows.url))
            except OSError:
                return None
            if (st.st_size, st.st_mtime_ns, st.st_ctime_ns) != (
                    rows.size, rows.mtime_ns, rows.ctime_ns):
                return None
        return rows

    def missing(self, entries: Sequence[ShardEntry]) -> List[ShardEntry]:
        """The entries without a fragment."""
        return [e for e in entries if not os.path.exists(self._fragment(e))]

    def index_missing(self, entries: Sequence[ShardEntry], policy: ReadPolicy) -> None:
        """Index ``entries`` (tars the first pass did not read to their end) into
        fragments."""
        for entry in entries:
            self.write(entry, index_entry(entry, policy))

    def assemble(self, list_file: str, policy: ReadPolicy) -> str:
        """Write the index of ``list_file`` from its fragments (a tar without one is
        indexed now), remove the fragments; returns the index path."""
        path = self.index_path(list_file)
        with IndexWriter(path, [str(list_file)]) as writer:
            for entry in read_shard_entries(list_file, policy=policy):
                rows = self.read(entry)
                writer.add(rows if rows is not None else index_entry(entry, policy))
            writer.close()
        shutil.rmtree(path + FRAGMENTS, ignore_errors=True)
        return path

    def open(self, paths: Any, *, policy: ReadPolicy, **kw: Any) -> CutSet:
        """:func:`~wenet_lhotse.formats.shard_reader.read_shard_list` whose reader
        records what it reads (:class:`RecordingShardIterator`)."""
        return CutSet(RecordingShardIterator(read_shard_entries(paths, policy=policy),
                                             recorder=self, policy=policy, **kw))


class RecordingShardIterator(LazyWenetShardIterator):
    """The shard reader (the same cuts, skips and errors) that also writes each tar it
    reads to its end as a fragment through ``recorder`` (see the module doc)."""

    record_offsets = True

    def __init__(self, shards: Sequence[Any], *, recorder: FirstPass, **kw: Any) -> None:
        super().__init__(shards, **kw)
        self.recorder = recorder
        self._rows: Optional[TarRows] = None
        self._elsewhere: Optional[WenetDataError] = None
        self._tar_keys = KeySet()
        self.stream: Any = None

    def _open_input(self, name: str, limits: Any) -> Any:
        stream = super()._open_input(name, limits)
        if not is_local(name):  # the fingerprint of a remote tar: from the bytes read
            stream = self.stream = FingerprintedStream(stream)
        return stream

    def _read_tar(self, entry: ShardEntry, seen: Optional[KeySet]) -> Iterator:
        self._rows = None if is_pipe(entry.url) else TarRows(url=entry.url)
        self._tar_keys, self.stream = KeySet(), None
        yield from super()._read_tar(entry, seen)
        rows, self._rows = self._rows, None  # reached only when read to its end
        if rows is not None:
            fingerprint(rows, self.stream)
            self.recorder.write(entry, rows)

    def _handle(self, err: WenetDataError) -> None:
        if self._rows is not None and err is not self._elsewhere:
            item = SkippedItem.from_error(err)
            self._rows.bad.append((item.message, item.kind, item.member))
        super()._handle(err)

    def _make_cut(self, tar: str, key: str, group: Dict[str, Any], seen: Any) -> Any:
        # duplicates within the tar as the indexer finds them; across tars the index
        # finds them itself (IndexWriter), the stream skips them here
        cut = super()._make_cut(tar, key, group, self._tar_keys)
        suffix = next(s for s in group if s in AUDIO_SUFFIXES)
        member, data = group[suffix]
        if self._rows is not None:
            offset = self._offsets.get(member)
            if offset is None:
                self._rows = None  # compressed: no offsets (the indexer records why)
            else:
                self._rows.add(cut, suffix, offset, len(data), zlib.crc32(data))
        if seen is not None and not seen.add(key):
            self._elsewhere = WenetDataError(f"duplicate key {key!r} (seen earlier in this "
                                             "input)", tar, member=member, kind="duplicate")
            raise self._elsewhere
        return cut
