"""Resume states checked before they are used: a checkpoint is input like any other.

A loader state is plain data, but a damaged or crafted one must not run anything,
replay or drop batches silently, nor blow up memory. This module holds the checks
:meth:`load_state_dict` applies, and the one reader of state files:

* :func:`read_state_file` -- a ``<checkpoint>.loader.rank<R>.pt`` file, read with
  ``torch.load(weights_only=True)`` only (plain containers, numbers, strings, tensors:
  a pickled ``__reduce__`` payload is refused, never called), at most
  :data:`MAX_STATE_FILE_BYTES`; any damage -- cut short, empty, not a torch file, a
  payload -- is one :class:`StateError` line naming the file (WeNet's own checkpoint
  load refuses such payloads too). The other files we read back are JSON or binary
  records, never pickles: probe caches (:mod:`~wenet_lhotse.sources.probe_cache`,
  JSON lines checked line by line, plus a digest sidecar), tar indexes
  (:mod:`~wenet_lhotse.formats.shard_index`, a JSON header and fixed-size records),
  Shar conversion state (:mod:`~wenet_lhotse.convert.shar_state`, JSON lines) and the
  manifest lines a state keeps (:func:`unpack_bounded`: zlib-compressed JSON);
* :func:`check_loader_state` -- the loader's own keys: types and ranges (``epoch``,
  ``consumed``, ``per_worker``, ``last_worker``; no negative or absurd positions);
* :func:`check_sampler_state` -- the map-style sampler's snapshot: every buffered
  item ``[stream, position, duration, rate, id(, line index)]`` in range and typed;
* :func:`unpack_bounded` -- the compressed manifest lines a state keeps, decompressed
  with a bound (:data:`MAX_STATE_LINES_BYTES`: a zlib bomb stops there);
* the lines a state carries are checked by the reader that reads them
  (:mod:`wenet_lhotse.sources.state_lines`: :func:`checked_state_line`,
  :class:`DuplicateIds`).

Every problem is one :class:`StateError` line naming the state's key; Lhotse and
WeNet check none of this (WeNet's loader has no state).
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import os
import zlib
from typing import Any, List, Mapping, Optional

from wenet_lhotse.sources.state_lines import StateError

#: Most bytes the kept lines of one state may decompress to (256 MiB: ~250k lines of
#: 1 KiB, ten times a large sampler buffer).
MAX_STATE_LINES_BYTES = 256 << 20
#: Largest position, count or epoch a state may hold (2^40: far above any corpus).
MAX_POSITION = 1 << 40
#: Largest loader-state file :func:`read_state_file` reads (a real one is a few kB, or a
#: few MB with kept manifest lines).
MAX_STATE_FILE_BYTES = 512 << 20



def read_state_file(path: os.PathLike[str] | str) -> Any:
    """The object saved in loader-state file ``path`` (``torch.save``), loaded with
    ``weights_only=True`` on the CPU; a :class:`StateError` (key ``(file)``, one line
    naming ``path``) for a file that is missing, empty, cut short, too large, not a
    torch file, or holds anything but plain data (a ``__reduce__`` payload is refused
    before it runs)."""
    import torch

    try:
        size = os.path.getsize(path)
        if size == 0:
            raise StateError("(file)", f"{path}: empty file")
        if size > MAX_STATE_FILE_BYTES:
            raise StateError("(file)", f"{path}: {size} bytes, more than the "
                                       f"{MAX_STATE_FILE_BYTES} a loader state may have")
        return torch.load(path, map_location="cpu", weights_only=True)
    except StateError:
        raise
    except Exception as err:  # noqa: BLE001 -- any damage is the same one line
        reason = " ".join((str(err).strip() or type(err).__name__).split())
        if len(reason) > 160:  # torch's refusal is a page of advice: keep its gist
            reason = reason[:157] + "..."
        raise StateError("(file)", f"{path}: not a loader state that loads as plain data "
                                   f"({type(err).__name__}: {reason})") from None


def _int(value: Any, key: str, lo: int = 0, hi: int = MAX_POSITION) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise StateError(key, f"expected an integer, got {type(value).__name__}")
    if not lo <= value <= hi:
        raise StateError(key, f"{value} is out of range [{lo}, {hi}]")
    return value


def _need(sd: Any, key: str, where: str) -> Any:
    if not isinstance(sd, Mapping):
        raise StateError(where, f"expected a mapping, got {type(sd).__name__}")
    if key not in sd:
        raise StateError(f"{where}.{key}" if where else key, "missing")
    return sd[key]


def check_loader_state(sd: Any, mode: str, num_workers: int = 0) -> None:
    """The keys a :class:`~.dataloader.LhotseDataLoader` state holds for ``mode``
    (``"map"`` or ``"streamed"``)."""
    if not isinstance(sd, Mapping):
        raise StateError("(top)", f"expected a mapping, got {type(sd).__name__}")
    if mode == "map":
        sampler = _need(sd, "sampler", "")
        _int(_need(sampler, "consumed", "sampler"), "sampler.consumed")
        return
    _int(_need(sd, "epoch", ""), "epoch")
    consumed = _int(_need(sd, "consumed", ""), "consumed")
    per_worker = sd.get("per_worker") or {}
    if not isinstance(per_worker, Mapping):
        raise StateError("per_worker", f"expected a mapping, got {type(per_worker).__name__}")
    for k, v in per_worker.items():
        try:
            wid = int(k)
        except (TypeError, ValueError):
            raise StateError("per_worker", f"worker id {str(k)[:20]!r} is not an integer") \
                from None
        _int(wid, "per_worker", 0, max(num_workers - 1, 0))
        _int(v, f"per_worker.{wid}", 0, consumed)  # a worker's batches are among them
    if sum(per_worker.values()) > consumed:
        raise StateError("per_worker", f"{sum(per_worker.values())} batches in all, more "
                                       f"than the {consumed} consumed")
    _int(sd.get("last_worker", -1), "last_worker", -1, max(num_workers - 1, 0))


def _item(item: Any, key: str, num_streams: int, num_lines: int) -> None:
    if not isinstance(item, list) or len(item) not in (5, 6):
        raise StateError(key, "expected [stream, position, duration, rate, id(, line)]")
    _int(item[0], f"{key}[0] (stream)", 0, num_streams - 1)
    _int(item[1], f"{key}[1] (position)")
    d = item[2]
    if isinstance(d, bool) or not isinstance(d, (int, float)) or not math.isfinite(d) or d <= 0:
        raise StateError(f"{key}[2] (duration)", f"expected a positive number, got {d!r:.40}")
    _int(item[3], f"{key}[3] (sampling rate)", 1, 1 << 24)
    if not isinstance(item[4], str):
        raise StateError(f"{key}[4] (id)", "expected a string")
    if len(item) == 6:
        _int(item[5], f"{key}[5] (line index)", 0, max(num_lines - 1, 0))


def check_sampler_state(sd: Any, num_streams: int) -> List[Any]:
    """Check a :class:`~.sampler.ResumableBucketingSampler` state; the kept lines
    (decompressed with the bound) when it has a snapshot, else ``[]``."""
    for key in ("version", "world_size", "seed", "shuffle", "epoch", "consumed", "snapshot"):
        _need(sd, key, "sampler")
    _int(sd["epoch"], "sampler.epoch")
    _int(sd["consumed"], "sampler.consumed")
    if not isinstance(sd["shuffle"], bool):
        raise StateError("sampler.shuffle", "expected true or false")
    snap = sd["snapshot"]
    if snap is None:
        return []
    for key in ("buckets", "rng", "sel", "mux"):
        _need(snap, key, "sampler.snapshot")
    kept = unpack_bounded(snap.get("lines"))
    for name in ("buckets", "merged"):
        groups = snap.get(name) or []
        if not isinstance(groups, list) or not all(isinstance(g, list) for g in groups):
            raise StateError(f"sampler.snapshot.{name}", "expected a list of lists")
        for i, group in enumerate(groups):
            for j, item in enumerate(group):
                _item(item, f"sampler.snapshot.{name}[{i}][{j}]", num_streams, len(kept))
    mux = snap["mux"]
    if not isinstance(mux, Mapping) or not isinstance(mux.get("next_pos"), list):
        raise StateError("sampler.snapshot.mux", "expected a mapping with next_pos")
    if len(mux["next_pos"]) != num_streams:
        raise StateError("sampler.snapshot.mux.next_pos",
                         f"{len(mux['next_pos'])} streams, the loader has {num_streams}")
    for s, pos in enumerate(mux["next_pos"]):
        _int(pos, f"sampler.snapshot.mux.next_pos[{s}]")
    return kept


def unpack_bounded(packed: Optional[str], limit: int = MAX_STATE_LINES_BYTES) -> List[Any]:
    """The values :func:`~.buffer_state.pack_lines` packed, decompressing at most
    ``limit`` bytes (a larger one is refused: a zlib bomb stops at the bound)."""
    if not packed:
        return []
    if not isinstance(packed, str):
        raise StateError("sampler.snapshot.lines", "expected a string")
    try:
        data = base64.b64decode(packed, validate=True)
        z = zlib.decompressobj()
        out = z.decompress(data, limit)
        if z.unconsumed_tail or not z.eof:
            raise StateError("sampler.snapshot.lines",
                             f"decompresses to more than {limit} bytes, or is cut short")
        values = json.loads(out.decode("utf-8"))
    except (binascii.Error, zlib.error, UnicodeDecodeError, ValueError,
            RecursionError) as err:
        if isinstance(err, StateError):
            raise
        raise StateError("sampler.snapshot.lines",
                         f"not packed lines ({type(err).__name__})") from None
    if not isinstance(values, list):
        raise StateError("sampler.snapshot.lines", "expected a list")
    return values


