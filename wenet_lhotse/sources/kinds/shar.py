"""``shar``: a Lhotse Shar directory (``cuts.*.jsonl.gz`` + ``recording.*.tar``), or a
prefix on object storage, or its ``fields`` (URLs per shard) given in the yaml.

Detected by its ``cuts.*.jsonl*`` files. A source is one directory. Map-style loading
reads the cuts jsonl by line number and fetches each cut's audio from its tar later (the
loader's ``SharAudioAttacher``); streaming gives each (rank, worker) its own shards
(:class:`~wenet_lhotse.sources.shar_stream.LazyCheckedShar` pairs members with cuts by
id, errors naming files), as Lhotse's ``CutSet.from_shar`` would.
"""

from __future__ import annotations

import random
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

from lhotse import CutSet

from wenet_lhotse.errors import WenetDataError
from wenet_lhotse.formats.split import reader_share
from wenet_lhotse.io.policy import ReadPolicy
from wenet_lhotse.io.remote import is_remote
from wenet_lhotse.sources.kinds.base import InputKind, PositionedReaders
from wenet_lhotse.sources.shar_dir import cuts_files, is_shar_dir, shar_fields, shar_files
from wenet_lhotse.sources.units import MANIFEST_INDEX, UnitCut, WorkUnit


class SharKind(InputKind):
    name = "shar"
    description = "Lhotse Shar directory (cuts.*.jsonl.gz + recording.*.tar)"
    import_cuts_refusal = import_shar_refusal = (
        "already Lhotse Shar: nothing to import (train from it as it is; `wenet-lhotse "
        "export` writes WeNet lists or shards)")
    streamable = True
    directory = True
    single_path = True
    takes_fields = True
    late_audio = True

    def sniff_dir(self, path: str) -> bool:
        return is_shar_dir(path)

    def resolve_spec(self, spec: Any) -> None:
        if spec.fields is None and is_remote(spec.paths[0]):
            # A Shar prefix on object storage is read by its fields (streamed), as if
            # the user had listed them.
            spec.fields = shar_fields(spec.paths[0])
            spec.path = None

    def open(self, paths: Sequence[str], policy: ReadPolicy, *, with_audio: bool = True,
             shuffle_shards: bool = False, seed: int = 0, epoch: int = 0,
             split_for_dataloading: bool = False,
             fields: Optional[Dict[str, List[str]]] = None,
             shar_shards: Optional[Sequence[int]] = None, **_: Any) -> CutSet:
        if fields is not None:
            _check_pipe_fields(fields, policy)
        if fields is None and len(paths) != 1:
            raise ValueError(f"{paths}: a Shar source takes one directory")
        if fields is None and is_remote(paths[0]):  # Lhotse globs in_dir locally only
            fields = shar_fields(paths[0])
        if not with_audio:
            return cuts_only(paths[0])
        if shar_shards is not None:
            return _chosen_shards(fields if fields is not None else shar_fields(paths[0]),
                                  shar_shards, policy)
        where = {"fields": fields} if fields is not None else {"in_dir": paths[0]}
        return CutSet.from_shar(**where, shuffle_shards=shuffle_shards,
                                split_for_dataloading=split_for_dataloading,
                                seed=seed + epoch, stateful_shuffle=False)

    def open_source(self, spec: Any, policy: ReadPolicy, **kw: Any) -> CutSet:
        if spec.fields is None and len(spec.paths) != 1:
            raise ValueError(f"source {spec.name}: a Shar source takes one directory")
        return super().open_source(spec, policy, **kw)

    def stream_kw(self, spec: Any, *, rank: int, world_size: int, worker: int,
                  num_workers: int, shuffle: bool, seed: int, epoch: int) -> Dict[str, Any]:
        # the split of Lhotse's split_for_dataloading, done here so that the worker id
        # is the loader's
        order = list(range(len(spec_fields(spec)["cuts"])))
        if shuffle:
            random.Random(seed + epoch).shuffle(order)
        return {"shar_shards": reader_share(order, rank, world_size, worker, num_workers)}

    def metadata(self, spec: Any, readers: PositionedReaders, transform: Any) -> CutSet:
        if spec.fields is not None:  # remote: the cuts field only
            return transform(CutSet.from_shar(fields={"cuts": spec.fields["cuts"]}))
        return transform(CutSet(readers.shar(spec.paths[0]).as_lazy_cuts()))

    def map_reader(self, spec: Any, readers: PositionedReaders) -> Any:
        return readers.shar(spec.paths[0])

    # -- the tools' work units (sources/units.py): one per shard, read by the task -----------
    unit_name = "shard"
    keys_repeat_across_units = True
    reads_in_caller = False
    index_note = MANIFEST_INDEX

    def work_units(self, path: str, policy: ReadPolicy, *, audio: bool = True, **_: Any
                   ) -> Tuple[Iterator[WorkUnit], Optional[int]]:
        """Its shards (for metadata, their cuts manifests alone); a shard without its
        recording tar, or a tar without its manifest, goes to ``policy``."""
        if not audio:
            return (WorkUnit(self.name, c, {"cuts": [c]}) for c in cuts_files(path)), None
        units = list(self._shards(path, policy))
        return iter(units), len(units)

    def _shards(self, in_dir: str, policy: ReadPolicy) -> Iterator[WorkUnit]:
        files = shar_files(in_dir)
        tars = {f: {i: p for i, p in by_index.items() if p.endswith(".tar")}
                for f, by_index in files.items() if f != "cuts"}
        cut_files = {i: p for i, p in files.get("cuts", {}).items() if ".jsonl" in p}
        for i, cuts_path in sorted(cut_files.items()):
            fields: Dict[str, List[str]] = {"cuts": [cuts_path]}
            fields.update({f: [by_index[i]] for f, by_index in tars.items() if i in by_index})
            if "recording" not in fields:
                policy.handle(WenetDataError(f"no recording.{i:06d}.tar next to it",
                                             cuts_path, kind="unpaired"))
                continue
            yield WorkUnit(self.name, fields["recording"][0], fields)
        others = {i for by_index in tars.values() for i in by_index} - set(cut_files)
        for i in sorted(others):
            policy.handle(WenetDataError("tar without its cuts manifest", str(in_dir),
                                         member=f"*.{i:06d}.tar", kind="unpaired"))

    def read_unit(self, unit: WorkUnit, policy: ReadPolicy, *, audio: bool = True
                  ) -> Iterator[UnitCut]:
        for cut in CutSet.from_shar(fields=unit.payload):
            yield UnitCut(cut, unit.label, cut.id)

    def audit_unit(self, unit: WorkUnit) -> List[WenetDataError]:
        """A shard written while items of its input were skipped (its skip record)."""
        from wenet_lhotse.sources.shar_record import read_record

        cuts_path = unit.payload["cuts"][0]
        record = read_record(cuts_path)
        if record is None:
            return []
        kinds = ", ".join(f"{k}: {v}" for k, v in sorted(record.get("kinds", {}).items()))
        return [WenetDataError(
            f"shard written with {record.get('skipped')} input items skipped ({kinds}); "
            "fix the input and run the import again to rewrite it", cuts_path,
            kind="incomplete_shard")]


def spec_fields(spec: Any) -> Dict[str, List[str]]:
    """``{field: [path or URL per shard]}`` of a Shar source: its ``fields``, or the
    files of its directory by shard index (:func:`~..shar_dir.shar_fields`)."""
    if spec.fields is not None:
        return {f: list(v) for f, v in spec.fields.items()}
    return shar_fields(spec.paths[0])


def cuts_only(in_dir: Any) -> CutSet:
    """A Shar directory's cut manifests only (no tar is opened): what statistics need."""
    cuts = cuts_files(in_dir)
    if not cuts:
        raise FileNotFoundError(f"{in_dir}: no cuts.*.jsonl.gz files: not a Lhotse Shar directory")
    return CutSet.from_shar(fields={"cuts": cuts})


def _chosen_shards(fields: Dict[str, List[str]], shards: Sequence[int],
                   policy: ReadPolicy) -> CutSet:
    """Exactly these shard indices, in this order (a streamed reader's share)."""
    from wenet_lhotse.sources.shar_stream import LazyCheckedShar, supported

    chosen = {f: [urls[i] for i in shards] for f, urls in fields.items()}
    if not shards:
        return CutSet()
    if supported(chosen):  # pairs members with cuts by id; errors name files
        return CutSet(LazyCheckedShar(chosen, policy=policy))
    return CutSet.from_shar(fields=chosen)


def _check_pipe_fields(fields: Dict[str, List[str]], policy: ReadPolicy) -> None:
    for name, urls in fields.items():
        for i, url in enumerate(urls):
            if str(url).startswith("pipe:"):
                policy.check_pipe(f"Shar fields[{name!r}][{i}] {url}")


KIND = SharKind()
