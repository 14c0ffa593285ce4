"""What one Shar shard on disk holds and how it was written: the completeness check
behind restartable conversion, and the record of what was skipped while writing it.

A shard written while items of its input were skipped (fault-tolerant mode) carries
a **skip record** in the gzip header of its ``cuts.<i>.jsonl.gz`` (the optional
``FCOMMENT`` field, RFC 1952): ``wenet-lhotse-skips:{"skipped": N, "kinds": {...},
"items": [first 20 locations and reasons]}``. Every gzip reader (Lhotse's, ``zcat``)
ignores it, it travels with the shard, and it is written in the same atomic rename
as the manifest. A shard holding a record is *not* complete: a rerun writes it
again (the input may have been fixed), and ``validate`` reports it.

The same record carries the shard's **input fingerprint** (:func:`input_fingerprint`:
the input tar's path, size and mtime, or the raw lines' cuts and their audio files'
sizes and mtimes, plus the options): a rerun with another or a changed input rewrites
the shards whose input differs instead of keeping them ("0 utterances written").
Shards on object storage are checked for presence only.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
import os
import shutil
import tarfile
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple, Union

from lhotse.utils import Pathlike

from wenet_lhotse.errors import SkippedItem, WenetDataError
from wenet_lhotse.io.remote import is_remote, remote_exists, remote_put
from wenet_lhotse.io.streams import open_input
from wenet_lhotse.io.tempfiles import process_running
from wenet_lhotse.sources.shar_dir import shard_paths
from wenet_lhotse.sources.shar_record import (
    _FCOMMENT,
    _FHCRC,
    _NO_MTIME,
    _TAG,
    FINGERPRINT_KEY,
    _header_end,
    _read_comment,
    read_fingerprint,
    read_record,
)

logger = logging.getLogger(__name__)

#: Skipped items listed in a record (all are counted).
RECORD_ITEMS = 20


def make_record(items: List[SkippedItem]) -> Dict[str, Any]:
    """The skip record of a shard from the items skipped while writing it."""
    kinds: Dict[str, int] = {}
    for item in items:
        kinds[item.kind] = kinds.get(item.kind, 0) + 1
    return {"skipped": len(items), "kinds": kinds,
            "items": [str(i) for i in items[:RECORD_ITEMS]]}


def write_record(cuts_path: Pathlike, record: Optional[Dict[str, Any]],
                 fingerprint: Optional[str] = None) -> None:
    """Put ``record`` (None: none) and the input's ``fingerprint`` into the gzip header
    of ``cuts_path`` (rewritten in place: call it on a file not yet visible to readers),
    and set the header's MTIME to 0: Lhotse's writer stamps the current time there, and
    equal shards must be equal bytes whether written locally, with ``-j`` or on a
    cluster, today or tomorrow."""
    if fingerprint is not None:
        record = {**(record or {}), FINGERPRINT_KEY: fingerprint}
    with open(cuts_path, "rb") as f:
        data = f.read()
    flags, name_end, end = _header_end(data)
    flags &= ~(_FCOMMENT | _FHCRC)
    comment = b""
    if record is not None:
        flags |= _FCOMMENT
        text = json.dumps(record, ensure_ascii=True, separators=(",", ":"))
        comment = _TAG + text.encode("ascii").replace(b"\0", b"") + b"\0"
    with open(cuts_path, "wb") as f:
        f.write(data[:3] + bytes([flags]) + _NO_MTIME + data[8:name_end] + comment
                + data[end:])


def input_fingerprint(parts: Sequence[Any]) -> str:
    """16 hex digits of SHA-256 over ``parts`` (JSON-able: paths, sizes, mtimes, lines,
    options) -- what a shard was written from."""
    h = hashlib.sha256()
    for part in parts:
        h.update(json.dumps(part, sort_keys=True, default=str, ensure_ascii=True).encode())
        h.update(b"\0")
    return h.hexdigest()[:16]


def file_identity(path: str) -> List[Any]:
    """``[path, size, mtime in ns]`` of a local file (``[path]`` for a URL or a file
    that cannot be stat'ed: its errors come when it is read)."""
    if is_remote(path) or "://" in path or path.startswith("pipe:"):
        return [path]
    try:
        st = os.stat(path)
    except OSError:
        return [path]
    return [path, st.st_size, st.st_mtime_ns]


def remote_shard_urls(out_dir: str, index: int) -> Tuple[str, str]:
    """``(cuts manifest URL, audio tar URL)`` of shard ``index`` under an object-store prefix."""
    cuts, tar = shard_paths("", index)
    return f"{out_dir.rstrip('/')}/{cuts.name}", f"{out_dir.rstrip('/')}/{tar.name}"


def _shard_files(out_dir: Union[Pathlike, str], index: int) -> Tuple[str, str]:
    if is_remote(str(out_dir)):
        return remote_shard_urls(str(out_dir), index)
    return tuple(str(p) for p in shard_paths(out_dir, index))  # type: ignore[return-value]


def shard_ids(out_dir: Union[Pathlike, str], index: int) -> List[str]:
    """The cut ids of shard ``index``'s manifest (local or object storage), in order."""
    with open_input(_shard_files(out_dir, index)[0]) as raw, \
            gzip.GzipFile(fileobj=raw) as f:
        return [json.loads(line)["id"] for line in f if line.strip()]


def shard_is_complete(out_dir: Union[Pathlike, str], index: int,
                      fingerprint: Optional[str] = None) -> bool:
    """True when shard ``index`` exists in full and was written from a complete input
    (no skip record) -- with ``fingerprint``, from that input (local shards: another or
    a changed input, or a shard without a fingerprint, is rewritten). Reads the (small)
    cuts manifest and walks the tar headers (seeking over the audio data), so it is
    cheap. On object storage an object exists
    only once its upload completed, and the manifest is uploaded after the tar: both
    objects present means complete (skip records are checked on local shards only)."""
    if is_remote(str(out_dir)):
        return all(remote_exists(u) for u in remote_shard_urls(str(out_dir), index))
    cuts_path, tar_path = shard_paths(out_dir, index)
    if not (cuts_path.is_file() and tar_path.is_file()):
        return False
    try:
        with gzip.open(cuts_path, "rb") as f:
            num_cuts = sum(1 for line in f if line.strip())
        size = tar_path.stat().st_size
        num_members = 0
        last_end = 0
        with tarfile.open(tar_path, "r:") as tar:
            for member in tar:
                num_members += 1
                last_end = member.offset_data + member.size
    except (OSError, EOFError, tarfile.TarError, gzip.BadGzipFile) as err:
        logger.info("shard %d in %s is damaged (%s); it will be rewritten", index, out_dir, err)
        return False
    if not (num_members == 2 * num_cuts and last_end <= size):
        logger.info("shard %d in %s is incomplete; it will be rewritten", index, out_dir)
        return False
    record = read_record(cuts_path)
    if record is not None:
        logger.info("shard %d in %s was written with %d items skipped; it will be rewritten",
                    index, out_dir, record.get("skipped", 0))
        return False
    if fingerprint is not None and read_fingerprint(cuts_path) != fingerprint:
        logger.warning("shard %d in %s was written from another input (or the input "
                       "changed since); it will be rewritten", index, out_dir)
        return False
    return True


def merge_record(record: Optional[Dict[str, Any]],
                 items: Sequence[SkippedItem]) -> Dict[str, Any]:
    """``record`` (or none) plus ``items`` skipped later."""
    out = dict(record or {"skipped": 0, "kinds": {}, "items": []})
    new = make_record(list(items))
    out["skipped"] = out.get("skipped", 0) + new["skipped"]
    kinds = dict(out.get("kinds", {}))
    for k, v in new["kinds"].items():
        kinds[k] = kinds.get(k, 0) + v
    out["kinds"] = kinds
    out["items"] = (list(out.get("items", [])) + new["items"])[:RECORD_ITEMS]
    return out


def drop_duplicates(out_dir: Union[Path, str], index: int, keys: Sequence[str],
                    errors: Sequence[WenetDataError], strict: bool,
                    work_dir: Optional[Path]) -> None:
    """Keys ``keys`` of the written shard ``index`` are already in other shards. Strict:
    the shard's manifest is removed (so a rerun writes it again; on object storage it
    stays: the caller's error says which). Fault-tolerant: the shard is rewritten
    without them, its skip record listing ``errors``. ``work_dir``: scratch space on
    the output's filesystem (None: a temporary directory)."""
    cuts_src, tar_src = _shard_files(out_dir, index)
    if strict:
        if not is_remote(str(out_dir)):
            os.remove(cuts_src)
        return
    if work_dir is not None:
        work_dir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f"dedup-{index:06d}-", dir=work_dir))
    try:
        cuts_tmp, tar_tmp = shard_paths(tmp, index)
        for src, dst in ((cuts_src, cuts_tmp), (tar_src, tar_tmp)):
            with open_input(src) as f, open(dst, "wb") as g:
                shutil.copyfileobj(f, g)
        drop_cuts(cuts_tmp, tar_tmp, set(keys))
        # keep the input's fingerprint: a rerun on the same input must not redo the shard
        fingerprint = (_read_comment(cuts_tmp) or {}).get(FINGERPRINT_KEY)
        write_record(cuts_tmp, merge_record(read_record(cuts_tmp),
                                            [SkippedItem.from_error(e) for e in errors]),
                     fingerprint)
        # Audio first, manifest last: a manifest in OUT means its tar is complete.
        for src, dst in ((tar_tmp, tar_src), (cuts_tmp, cuts_src)):
            if is_remote(str(out_dir)):
                remote_put(str(src), dst)
            else:
                os.replace(src, dst)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def drop_cuts(cuts_path: Pathlike, tar_path: Pathlike, drop: Set[str]) -> None:
    """Remove the cuts with ids in ``drop`` from a shard (manifest lines and their tar
    members, which are named ``<id>.<ext>``), rewriting both files in place."""
    with gzip.open(cuts_path, "rb") as f:
        lines = [ln for ln in f if ln.strip() and json.loads(ln)["id"] not in drop]
    with gzip.GzipFile(cuts_path, "wb", mtime=0) as f:
        f.writelines(lines)
    tmp = f"{tar_path}.filtered"
    with tarfile.open(tar_path, "r:") as src, tarfile.open(tmp, "w") as dst:
        for member in src:
            if member.name.rsplit(".", 1)[0] not in drop:
                dst.addfile(member, src.extractfile(member))
    os.replace(tmp, tar_path)


def empty_shard(cuts_path: Pathlike, tar_path: Pathlike) -> None:
    """Write a shard with no cuts (keeps the shard numbering without gaps)."""
    with gzip.GzipFile(cuts_path, "wb", mtime=0):
        pass
    with tarfile.open(tar_path, "w"):
        pass


def partial_dir(out_dir: Pathlike) -> Path:
    """Where shards are written before they are moved into ``out_dir``."""
    out_dir = Path(out_dir).absolute()
    return out_dir.parent / f".{out_dir.name}.partial"


def remove_partial_dir(out_dir: Path) -> None:
    """Remove what dead writers left in ``.OUT.partial/`` (``shard-<i>-<pid>``), then the
    directory itself when empty: another run may still be writing there."""
    tmp = partial_dir(out_dir)
    for sub in tmp.glob("shard-*-*"):
        pid = sub.name.rsplit("-", 1)[1]
        if pid.isdigit() and not process_running(int(pid)):
            shutil.rmtree(sub, ignore_errors=True)
    try:
        tmp.rmdir()
    except OSError:
        pass
