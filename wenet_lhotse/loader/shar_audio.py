"""Shar audio for the cuts of emitted batches only: :class:`SharAudioAttacher` finds a
cut's member in its ``recording.*.tar`` by reading tar headers (data seeked over), then
reads the member with one seek. Map-style loading reads Shar metadata alone
(:class:`~.readers.JsonlReader`), so restoring a sampler never touches audio.
"""

from __future__ import annotations

import tarfile
import threading
from typing import Any, Dict, Optional, Tuple

from lhotse import CutSet

from wenet_lhotse.errors import SkipReport, WenetDataError


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


class SharAudioAttacher:
    """Attach Shar audio to metadata cuts: ``custom["shar_tar"]`` names the tar; the
    member ``<cut_id>.<ext>`` is located from the tar headers (read incrementally, data
    seeked over, remembered per process) and read with one seek. Thread-safe; a copy
    sent to a DataLoader worker starts with an empty index. A cut whose member is
    missing raises :class:`WenetDataError` naming the tar (``strict``), or is left out
    and recorded in ``skip_report`` (the loader forwards it with the batch)."""

    def __init__(self, strict: bool = True) -> None:
        self.strict = strict
        self.skip_report = SkipReport()
        self._scans: Dict[str, _TarScan] = {}
        self._lock = threading.Lock()

    def __getstate__(self) -> Dict[str, Any]:
        return {"strict": self.strict}

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__init__(state.get("strict", True))

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

    def __call__(self, cuts: CutSet) -> CutSet:
        from lhotse.shar.utils import fill_shar_placeholder

        out = []
        for cut in cuts:
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
                self.skip_report.handle(WenetDataError(
                    f"cannot read audio of cut {cut.id!r}: {err}", tar, member=cut.id,
                    kind="missing_audio"), self.strict)
                continue
            except WenetDataError as err:
                self.skip_report.handle(err, self.strict)
                continue
            fill_shar_placeholder(cut.recording, data=data, tarpath=name)
            out.append(cut)
        return CutSet.from_cuts(out)
