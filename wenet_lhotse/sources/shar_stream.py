"""Shar shards streamed with errors that name the file, and fault tolerance.

Lhotse's Shar reader (``CutSet.from_shar``) zips a shard's cuts manifest with its
tar member pairs: one missing member shifts every later pair (``AssertionError:
Mismatched IDs``) and a truncated manifest raises a bare ``EOFError``.
:class:`LazyCheckedShar` reads the same layout (``cuts.<i>.jsonl.gz`` and
``recording.<i>.tar`` of data member + ``.json`` manifest per cut, as Lhotse writes
it) but pairs members with cuts by id:

* a cut whose audio member (or its ``.json``) is missing: kind ``"missing_audio"``;
* a member with no cut in the manifest: kind ``"unpaired"``;
* a manifest or tar cut short or corrupt: kind ``"truncated"``, saying how many cuts
  of the shard were lost with it;
* a bad member (link, device, sparse, over the size cap): kind ``"bad_member"``.

Strict mode raises :class:`~wenet_lhotse.errors.WenetDataError` naming the file
(and member); fault-tolerant mode records the item and goes on with the next one.
Cuts come in manifest order. Only the ``recording`` tar field is read this way (what
``wenet-lhotse import`` writes); a Shar source with other tar fields is read by
Lhotse's own reader.
"""

from __future__ import annotations

import gzip
import tarfile
import zlib
from collections import OrderedDict
from typing import Any, Dict, Iterator, List, Optional, Tuple

from lhotse.cut import Cut
from lhotse.lazy import Dillable
from lhotse.serialization import decode_json_line, deserialize_item, open_best
from lhotse.shar.utils import fill_shar_placeholder

from wenet_lhotse.errors import WenetDataError
from wenet_lhotse.formats.checks import max_member_bytes, member_problem
from wenet_lhotse.io.lines import bounded_lines
from wenet_lhotse.io.policy import PolicyHolder, ReadPolicy

_READ_ERRORS = (OSError, EOFError, zlib.error, gzip.BadGzipFile, tarfile.TarError,
                UnicodeDecodeError, ValueError, KeyError, TypeError)


def supported(fields: Dict[str, List[str]]) -> bool:
    """True when :class:`LazyCheckedShar` reads these fields (cuts + recording tars)."""
    return set(fields) == {"cuts", "recording"} and all(
        ".tar" in str(u) for u in fields["recording"])


class LazyCheckedShar(PolicyHolder, Dillable):
    """The cuts of Shar shards ``fields`` (``{"cuts": [...], "recording": [...]}``, one
    entry per shard, in reading order), audio attached, checked as the module doc says;
    bad items raised or skipped and the member size cap as ``policy`` says."""

    _lost_manifest = False  # the current shard's manifest was cut short

    def __init__(self, fields: Dict[str, List[str]], *,
                 policy: Optional[ReadPolicy] = None) -> None:
        self.fields = {k: [str(u) for u in v] for k, v in fields.items()}
        self.policy = (policy or ReadPolicy())

    def _handle(self, err: WenetDataError) -> None:
        self.policy.handle(err)

    def __iter__(self) -> Iterator[Cut]:
        for cuts_path, tar_path in zip(self.fields["cuts"], self.fields["recording"]):
            yield from self._shard(cuts_path, tar_path)

    def __len__(self) -> int:
        raise TypeError("a streamed Shar source has no len()")

    def _manifest(self, path: str) -> Tuple[OrderedDict[str, Cut], bool]:
        """The shard's cuts by id, and whether the manifest was read to its end."""
        cuts: OrderedDict[str, Cut] = OrderedDict()
        no = 0
        try:
            with open_best(path, "r") as f:
                long = None if self.policy.strict else self._handle  # strict: at once
                for no, line in bounded_lines(f, path, self.policy.line_limit(),  # noqa: B007
                                              long):
                    if line.strip():
                        cut = deserialize_item(decode_json_line(line))
                        cuts[cut.id] = cut
        except WenetDataError as err:
            if err.kind != "too_long":
                raise
            self._handle(err)
            return cuts, False
        except _READ_ERRORS as err:
            self._handle(WenetDataError(
                f"unreadable after line {no}: {type(err).__name__}: {err}", path,
                line=no + 1, kind="truncated"))
            return cuts, False
        return cuts, True

    def _shard(self, cuts_path: str, tar_path: str) -> Iterator[Cut]:
        cuts, whole = self._manifest(cuts_path)
        self._lost_manifest = not whole  # members of the lost cuts are not reported again
        cap = max_member_bytes(self.policy.max_member_bytes)
        pending: Optional[Tuple[str, bytes, str]] = None  # (id, data, member name)
        member = None
        try:
            with tarfile.open(fileobj=open_best(tar_path, "rb"), mode="r|*") as tar:
                for info in tar:
                    member = info.name
                    why = member_problem(info, cap)
                    if why is not None:
                        self._handle(WenetDataError(why, tar_path, member=member,
                                                    kind="bad_member"))
                        continue
                    stem, _, ext = member.rpartition(".")
                    data = tar.extractfile(info).read()
                    if ext not in ("json", "nometa"):
                        if pending is not None:
                            self._orphan(tar_path, pending[2], "no .json manifest after it")
                        pending = (stem, data, member)
                        continue
                    if pending is None or pending[0] != stem:
                        if pending is not None:
                            self._orphan(tar_path, pending[2], "no .json manifest after it")
                        pending = None
                        self._no_data(cuts, stem, tar_path, member)
                        continue
                    _, payload, data_name = pending
                    pending = None
                    cut = self._take(cuts, stem, tar_path, data_name)
                    if cut is None:
                        continue
                    if ext == "json":
                        manifest: Any = deserialize_item(decode_json_line(data.decode("utf-8")))
                        fill_shar_placeholder(manifest=manifest, data=payload, tarpath=data_name)
                        cut.recording = manifest
                    yield cut
        except _READ_ERRORS as err:
            if isinstance(err, WenetDataError):
                raise
            at = f" after member {member}" if member else ""
            self._handle(WenetDataError(
                f"tar unreadable{at} ({type(err).__name__}: {err}); {len(cuts)} cuts of this "
                "shard lost", tar_path, member=member, kind="truncated"))
            return
        if pending is not None:
            self._orphan(tar_path, pending[2], "no .json manifest after it")
        for cut_id in list(cuts):
            self._handle(WenetDataError(f"no audio member for cut {cut_id!r}", tar_path,
                                        member=cut_id, kind="missing_audio"))

    def _orphan(self, tar_path: str, member: str, why: str) -> None:
        if self._lost_manifest:
            return
        self._handle(WenetDataError(f"member without its pair: {why}", tar_path,
                                    member=member, kind="unpaired"))

    def _no_data(self, cuts: OrderedDict[str, Cut], stem: str, tar_path: str,
                 member: str) -> None:
        """A ``.json`` without its data member: that cut is lost."""
        if cuts.pop(stem, None) is None and self._lost_manifest:
            return
        self._handle(WenetDataError(f"no audio member for cut {stem!r}", tar_path,
                                    member=member, kind="missing_audio"))

    def _take(self, cuts: OrderedDict[str, Cut], cut_id: str, tar_path: str,
              member: str) -> Optional[Cut]:
        """The cut ``cut_id``; cuts listed before it had no member in the tar."""
        if cut_id not in cuts:
            self._orphan(tar_path, member, "no cut with this id in the manifest")
            return None
        while True:
            first, cut = cuts.popitem(last=False)
            if first == cut_id:
                return cut
            self._handle(WenetDataError(f"no audio member for cut {first!r}", tar_path,
                                        member=first, kind="missing_audio"))
