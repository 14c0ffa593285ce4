"""The shard index file: every utterance of a WeNet shard list, where its audio lies
in its tar, and each tar's fingerprint (written by :mod:`wenet_lhotse.convert.index`,
read by :class:`~wenet_lhotse.sources.indexed_shards.IndexReader`).

Layout (one file, written atomically): the line ``WENET-LHOTSE-SHARD-INDEX 1``, an
8-byte little-endian header length, a JSON header, then numpy columns at 64-byte
aligned offsets. The header holds the tars in list order (``url``, ``size`` in bytes,
``mtime_ns`` for local tars, ``digest``, ``first`` row, ``count`` rows and ``bad``:
what the reader skipped, as ``[message, kind, member]``), the audio suffixes and
each column's ``[dtype, offset, count]``. Columns, one item per utterance in tar
order: ``tar`` (int32), ``offset`` / ``size`` of the audio member's data (int64,
bytes), ``num_samples`` (int64), ``rate`` (int32, Hz), ``channels`` (uint8), ``fmt``
(uint8, into the suffixes), ``crc`` (uint32: ``zlib.crc32`` of the audio member's data,
checked by each read by offset), and the strings ``keys``, ``texts``, ``extras`` (UTF-8
bytes joined, with ``*_end`` int64 end offsets; ``extras`` is JSON of speaker, lang
and custom members, empty for none). Loading maps the file (``mmap``): nothing is
parsed per utterance until a row is asked for, so opening an index of 10M utterances
costs the JSON header only. ``wenet-lhotse index`` writes it tar by tar, its rows never
all in memory (:class:`~wenet_lhotse.formats.index_writer.IndexWriter`).

Why not a Lhotse manifest: a 10M-line ``jsonl.gz`` takes minutes to parse into
memory, and a position-keyed reader needs random access by row (see
``bench/index.py`` for the sizes and load times measured).
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import struct
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from wenet_lhotse.errors import WenetDataError
from wenet_lhotse.formats.tar_index import TarRows
from wenet_lhotse.io.streams import atomic_output, is_local, local_path

MAGIC = b"WENET-LHOTSE-SHARD-INDEX 1\n"
SUFFIX = ".index"
_ALIGN = 64

#: column -> dtype (the string columns are ``keys``/``texts``/``extras`` + ``*_end``)
NUMERIC = {"tar": np.int32, "offset": np.int64, "size": np.int64, "num_samples": np.int64,
           "rate": np.int32, "channels": np.uint8, "fmt": np.uint8, "crc": np.uint32}
STRINGS = ("keys", "texts", "extras")


def index_path(list_path: str, cache_dir: Optional[str] = None) -> str:
    """Where the index of shard list ``list_path`` lives: ``<list>.index`` beside it,
    or ``<cache_dir>/<list name>.<hash of its absolute path>.index``."""
    name = str(list_path)
    if cache_dir is None:
        if not is_local(name):
            raise ValueError(f"{name}: the index of a remote shard list needs a cache "
                             "directory (--cache-dir / lhotse_conf.shard_index: DIR)")
        return local_path(name) + SUFFIX
    full = os.path.abspath(local_path(name)) if is_local(name) else name
    tag = hashlib.sha1(full.encode("utf-8")).hexdigest()[:12]
    return str(Path(cache_dir) / f"{Path(name).name}.{tag}{SUFFIX}")


def write_columns(path: str, tars: List[Dict[str, Any]], fmts: Sequence[str],
                  cols: Dict[str, np.ndarray], lists: Sequence[str] = ()) -> int:
    """Write an index from its header's tar records and its columns (see the module
    doc) atomically; returns the bytes written (all columns in memory: for a synthetic
    index; ``wenet-lhotse index`` writes tar by tar with :class:`~.index_writer.IndexWriter`)."""
    layout: Dict[str, List[Any]] = {}
    at = 0
    for name, arr in cols.items():
        layout[name] = [arr.dtype.str, at, int(arr.size)]
        at += -(-arr.nbytes // _ALIGN) * _ALIGN
    n = int(cols["tar"].size)
    header = json.dumps({"version": 1, "lists": [str(p) for p in lists], "utterances": n,
                         "fmts": list(fmts), "tars": tars, "columns": layout},
                        ensure_ascii=False).encode("utf-8")
    start = len(MAGIC) + 8 + len(header)
    start += -start % _ALIGN
    with atomic_output(path, "wb") as f:
        f.write(MAGIC + struct.pack("<Q", len(header)) + header)
        f.write(bytes(start - f.tell()))
        for arr in cols.values():
            f.write(arr.tobytes())
            f.write(bytes(-arr.nbytes % _ALIGN))
        size = f.tell()
    return size


class ShardIndex:
    """A loaded index (memory-mapped, see the module doc). ``tars``: the header's tar
    records; ``n``: utterances; per-row accessors decode one row."""

    def __init__(self, path: str) -> None:
        self.path = str(path)
        try:
            with open(self.path, "rb") as f:
                magic = f.read(len(MAGIC))
                if magic != MAGIC:
                    raise WenetDataError("not a shard index (rerun wenet-lhotse index)",
                                         self.path, kind="stale_index")
                (hlen,) = struct.unpack("<Q", f.read(8))
                if hlen > os.fstat(f.fileno()).st_size:  # never a read of what is not there
                    raise ValueError(f"header length {hlen} past the end of the file")
                header = json.loads(f.read(hlen).decode("utf-8"))
                if not isinstance(header, dict):
                    raise ValueError("the header is not a JSON object")
                self._mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError, struct.error) as err:
            if isinstance(err, WenetDataError):
                raise
            raise WenetDataError(f"damaged shard index ({err}); rebuild it: wenet-lhotse index "
                                 "<its shard list>",
                                 self.path, kind="stale_index") from None
        start = len(MAGIC) + 8 + hlen
        start += -start % _ALIGN
        try:
            self.tars: List[Dict[str, Any]] = header["tars"]
            self.fmts: List[str] = header["fmts"]
            self.lists: List[str] = header.get("lists", [])
            self.n: int = header["utterances"]
            self.cols: Dict[str, np.ndarray] = {
                name: np.frombuffer(self._mm, dtype=np.dtype(dt), count=count,
                                    offset=start + at)
                for name, (dt, at, count) in header["columns"].items()}
            why = _damage(self)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as err:
            why = f"{type(err).__name__}: {err}"
        if why is not None:
            lists = header.get("lists") if isinstance(header, dict) else None
            cmd = f"wenet-lhotse index {lists[0]}" if isinstance(lists, list) and lists \
                else "wenet-lhotse index <its shard list>"
            raise WenetDataError(f"damaged shard index ({why}); rebuild it: {cmd}",
                                 self.path, kind="stale_index")
        self._by_url: Optional[Dict[str, int]] = None

    def tar_of_url(self, url: str) -> Optional[int]:
        if self._by_url is None:
            self._by_url = {t["url"]: i for i, t in enumerate(self.tars)}
        return self._by_url.get(url)

    def _string(self, name: str, row: int) -> str:
        ends = self.cols[name + "_end"]
        lo = int(ends[row - 1]) if row else 0
        return self.cols[name][lo:int(ends[row])].tobytes().decode("utf-8")

    def key(self, row: int) -> str:
        return self._string("keys", row)

    def text(self, row: int) -> str:
        return self._string("texts", row)

    def extra(self, row: int) -> str:
        return self._string("extras", row)

    def member(self, row: int) -> str:
        """The audio member's name in its tar."""
        return f"{self.key(row)}.{self.fmts[int(self.cols['fmt'][row])]}"

    def tar_rows(self, t: int) -> TarRows:
        """The rows of tar ``t`` as :class:`TarRows` (a rerun keeps unchanged tars)."""
        rec = self.tars[t]
        rows = range(rec["first"], rec["first"] + rec["count"])
        c = self.cols
        return TarRows(
            url=rec["url"], size=rec["size"], mtime_ns=rec["mtime_ns"], digest=rec["digest"],
            ctime_ns=rec.get("ctime_ns"),
            keys=[self.key(r) for r in rows],
            fmts=[self.fmts[int(c["fmt"][r])] for r in rows],
            offsets=[int(v) for v in c["offset"][rows.start:rows.stop]],
            sizes=[int(v) for v in c["size"][rows.start:rows.stop]],
            num_samples=[int(v) for v in c["num_samples"][rows.start:rows.stop]],
            rates=[int(v) for v in c["rate"][rows.start:rows.stop]],
            channels=[int(v) for v in c["channels"][rows.start:rows.stop]],
            crcs=[int(v) for v in c["crc"][rows.start:rows.stop]],
            texts=[self.text(r) for r in rows], extras=[self.extra(r) for r in rows],
            bad=[tuple(b) for b in rec["bad"]])

    def __getstate__(self) -> Dict[str, Any]:
        return {"path": self.path}

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__init__(state["path"])


#: Keys of each tar record of the header, and their types.
_TAR_KEYS = {"url": str, "first": int, "count": int, "bad": list}


def _damage(ix: ShardIndex) -> Optional[str]:
    """What is inconsistent in a loaded index (cheap: one vectorized pass over the
    ``tar`` column), or None. A record whose ``first`` row points into another tar's rows
    would train some utterances twice and some never."""
    n = ix.n
    if not isinstance(n, int) or n < 0 or not isinstance(ix.tars, list):
        return "bad header"
    need = {**{k: n for k in NUMERIC}, **{k + "_end": n for k in STRINGS}}
    for name, count in need.items():
        col = ix.cols.get(name)
        if col is None or col.size != count:
            return f"column {name!r} missing or not {count} rows"
    for name in STRINGS:
        ends = ix.cols[name + "_end"]
        if n and (ends[-1] != ix.cols[name].size or np.any(np.diff(ends) < 0) or ends[0] < 0):
            return f"column {name!r} cut short or out of order"
    first = 0
    counts = []
    for t, rec in enumerate(ix.tars):
        if not isinstance(rec, dict) or any(not isinstance(rec.get(k), ty)
                                            for k, ty in _TAR_KEYS.items()):
            return f"tar record {t} is malformed"
        if rec["first"] != first or rec["count"] < 0:
            return (f"tar record {t} ({rec['url']}) says its rows start at {rec['first']}, "
                    f"but they start at {first}")
        first += rec["count"]
        counts.append(rec["count"])
    if first != n:
        return f"the tar records hold {first} rows, the columns {n}"
    expect = np.repeat(np.arange(len(counts), dtype=np.int32), counts)
    if not np.array_equal(ix.cols["tar"], expect):
        return "rows name other tars than their tar records say"
    fmt = ix.cols["fmt"]
    if n and int(fmt.max()) >= len(ix.fmts):
        return "an audio format number past the header's list"
    return None


def tar_problem(rec: Dict[str, Any]) -> Optional[str]:
    """Why tar record ``rec`` of an index no longer describes the tar, or None. Local
    tars: missing, another size, or (another mtime and) other first/last 64 KiB. Remote
    tars are not looked at here (each read checks the member's tar header)."""
    from wenet_lhotse.formats.tar_index import local_fingerprint

    url = rec["url"]
    if not is_local(url) or rec.get("size") is None:
        return None
    try:
        size, mtime_ns, _ = local_fingerprint(local_path(url), with_digest=False)
        if size != rec["size"]:
            return (f"changed since it was indexed ({size} bytes, indexed {rec['size']})")
        if mtime_ns != rec.get("mtime_ns") and (
                local_fingerprint(local_path(url))[2] != rec.get("digest")):
            return "changed since it was indexed (its contents differ)"
    except FileNotFoundError:
        return "missing (it was indexed)"
    except OSError as err:
        return f"cannot be read ({err})"
    return None
