"""Open any input as a lazy Lhotse ``CutSet``: one dispatcher by kind, behind the
three ways in (a path: :func:`open_cuts`; a yaml source: :func:`open_source`; WeNet
lists: :func:`read_wenet_list`), plus source tags (:class:`TagCuts`) and weighted
mixing with Lhotse's ``CutSet.mux`` (:func:`mux_sources`).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from lhotse import CutSet
from lhotse.cut import Cut
from lhotse.lazy import Dillable
from lhotse.utils import Pathlike, fastcopy

from wenet_lhotse.errors import SkipReport, WenetDataError
from wenet_lhotse.formats.raw_list import read_raw_list
from wenet_lhotse.formats.shard_reader import read_shard_list
from wenet_lhotse.io.access import PIPE_REFUSED
from wenet_lhotse.io.remote import is_remote
from wenet_lhotse.io.streams import as_path_list
from wenet_lhotse.sources.detect import KINDS, detect_data_type, detect_input_kind
from wenet_lhotse.sources.manifest import LazyCheckedManifest
from wenet_lhotse.sources.meta_cut import MetaCut
from wenet_lhotse.sources.shar_dir import cuts_files, shar_fields
from wenet_lhotse.sources.shar_stream import LazyCheckedShar
from wenet_lhotse.sources.shar_stream import supported as supported_shar
from wenet_lhotse.sources.spec import SourceSpec


def open_kind(
    kind: str,
    paths: Sequence[str],
    *,
    strict: bool = True,
    skip_report: Optional[SkipReport] = None,
    wav_root: Optional[Pathlike] = None,
    with_audio: bool = True,
    shuffle_shards: bool = False,
    seed: int = 0,
    epoch: int = 0,
    split_for_dataloading: bool = False,
    fields: Optional[Dict[str, List[str]]] = None,
    shar_shards: Optional[Sequence[int]] = None,
    allow_pipe: bool = False,
    **split_kw: Any,
) -> CutSet:
    """The one open-by-kind dispatcher (see :func:`open_cuts` / :func:`open_source` for
    the arguments). ``fields``: a Shar source given by URLs instead of a directory.
    ``allow_pipe``: run ``pipe:`` inputs and ``command`` audio sources (shell commands
    from the data); without it they are refused."""
    if kind == "raw":
        return read_raw_list(paths, wav_root=wav_root, strict=strict, skip_report=skip_report)
    if kind == "shard":
        return read_shard_list(paths, shuffle_shards=shuffle_shards, seed=seed, epoch=epoch,
                               split_for_dataloading=split_for_dataloading, strict=strict,
                               skip_report=skip_report, allow_pipe=allow_pipe, **split_kw)
    if kind == "cuts":
        checked = [p for p in paths if ".jsonl" in p]
        others = [CutSet.from_file(p) for p in paths if ".jsonl" not in p]
        if checked:
            others.insert(0, CutSet(LazyCheckedManifest(checked, strict=strict,
                                                        skip_report=skip_report,
                                                        allow_pipe=allow_pipe)))
        return _chain(others)
    if fields is not None and not allow_pipe:
        _refuse_pipe_fields(fields)
    if kind == "shar":
        if fields is None and len(paths) != 1:
            raise ValueError(f"{paths}: a Shar source takes one directory")
        if fields is None and is_remote(paths[0]):  # Lhotse globs in_dir locally only
            fields = shar_fields(paths[0])
        if not with_audio:
            return read_shar(paths[0], with_audio=False)
        if shar_shards is not None:
            all_fields = fields if fields is not None else shar_fields(paths[0])
            chosen = {f: [urls[i] for i in shar_shards] for f, urls in all_fields.items()}
            if not shar_shards:
                return CutSet()
            if supported_shar(chosen):  # pairs members with cuts by id; errors name files
                return CutSet(LazyCheckedShar(chosen, strict=strict, skip_report=skip_report))
            return CutSet.from_shar(fields=chosen)
        where = {"fields": fields} if fields is not None else {"in_dir": paths[0]}
        return CutSet.from_shar(**where, shuffle_shards=shuffle_shards,
                                split_for_dataloading=split_for_dataloading,
                                seed=seed + epoch, stateful_shuffle=False)
    raise ValueError(f"kind must be one of {tuple(KINDS)} or 'auto', got {kind!r}")


def _refuse_pipe_fields(fields: Dict[str, List[str]]) -> None:
    for name, urls in fields.items():
        for i, url in enumerate(urls):
            if str(url).startswith("pipe:"):
                raise WenetDataError(PIPE_REFUSED, f"Shar fields[{name!r}][{i}] {url}",
                                     kind="refused")


def open_cuts(
    path: Pathlike,
    *,
    kind: str = "auto",
    strict: bool = True,
    skip_report: Optional[SkipReport] = None,
    with_audio: bool = True,
    wav_root: Optional[Pathlike] = None,
    allow_pipe: bool = False,
) -> Tuple[CutSet, str]:
    """Open ``path`` lazily as a CutSet; returns ``(cuts, kind)``.

    :param kind: one of :data:`~wenet_lhotse.sources.detect.KINDS` or ``"auto"`` (detected).
    :param strict: WeNet readers raise on the first bad item; otherwise they skip it
        and record it in ``skip_report``.
    :param with_audio: for Shar, False reads only the cut manifests (no tars).
    :param wav_root: for raw lists, the directory relative ``wav`` paths resolve
        against (default: the working directory, as WeNet does).
    :param allow_pipe: run ``pipe:`` lines of shard lists and ``command`` audio sources
        of manifests (shell commands from the data); without it they are bad input.
    """
    if kind == "auto":
        kind = detect_input_kind(path)
    return open_kind(kind, [str(path)], strict=strict, skip_report=skip_report,
                     with_audio=with_audio, wav_root=wav_root, allow_pipe=allow_pipe), kind


def read_shar(in_dir: Pathlike, *, with_audio: bool = True) -> CutSet:
    """Open a Shar directory lazily; ``with_audio=False`` reads only the cut manifests
    (no tar is opened), which is what statistics need."""
    if with_audio:
        if is_remote(str(in_dir)):
            return CutSet.from_shar(fields=shar_fields(in_dir))
        return CutSet.from_shar(in_dir=in_dir)
    cuts = cuts_files(in_dir)
    if not cuts:
        raise FileNotFoundError(f"{in_dir}: no cuts.*.jsonl.gz files: not a Lhotse Shar directory")
    return CutSet.from_shar(fields={"cuts": cuts})


def read_wenet_list(
    paths: Union[Pathlike, Sequence[Pathlike]], data_type: str = "auto", **kwargs: Any
) -> CutSet:
    """Open WeNet list(s) as a lazy CutSet: :func:`~wenet_lhotse.formats.read_raw_list`
    for ``"raw"``, :func:`~wenet_lhotse.formats.read_shard_list` for ``"shard"``;
    ``"auto"`` decides per file from its content (all files must agree). ``kwargs`` go
    to that reader."""
    if data_type == "shards":
        data_type = "shard"
    if data_type not in ("auto", "raw", "shard"):
        raise ValueError(f"data_type must be one of ('auto', 'raw', 'shard'), got {data_type!r}")
    files = as_path_list(paths)
    if data_type == "auto":
        kinds = {p: detect_data_type(p) for p in files}
        if len(set(kinds.values())) > 1:
            raise ValueError(f"lists of different types given together: {kinds}")
        data_type = next(iter(kinds.values()), "raw")
    if data_type == "raw":
        return read_raw_list(files, **kwargs)
    return read_shard_list(files, **kwargs)


class TagCuts(Dillable):
    """Picklable ``cut -> cut`` that adds ``tags`` to ``cut.custom`` (existing keys win)."""

    def __init__(self, tags: Mapping[str, Any]) -> None:
        self.tags = dict(tags)

    def __call__(self, cut: Cut) -> Cut:
        if not self.tags:
            return cut
        if isinstance(cut, MetaCut):  # tags go into the cut it builds
            return cut.tagged(self.tags)
        custom = dict(self.tags)
        custom.update(cut.custom or {})
        return fastcopy(cut, custom=custom)


def spec_shar_fields(spec: SourceSpec) -> Dict[str, List[str]]:
    """``{field: [path or URL per shard]}`` of a Shar source: its ``fields``, or the
    files of its directory by shard index
    (:func:`~wenet_lhotse.sources.shar_dir.shar_fields`)."""
    if spec.fields is not None:
        return {f: list(v) for f, v in spec.fields.items()}
    return shar_fields(spec.paths[0])


def open_source(
    spec: SourceSpec,
    *,
    strict: bool = True,
    skip_report: Optional[SkipReport] = None,
    shuffle_shards: bool = False,
    seed: int = 0,
    epoch: int = 0,
    split_for_dataloading: bool = False,
    transform: Optional[Callable[[CutSet], CutSet]] = None,
    shar_shards: Optional[Sequence[int]] = None,
    allow_pipe: bool = False,
    **split_kw: Any,
) -> CutSet:
    """Open ``spec`` as a lazy CutSet with its tags attached (no audio is decoded).

    :param shuffle_shards: shuffle the order of tars (shard/Shar) with ``seed + epoch``.
    :param split_for_dataloading: give each (rank, DataLoader worker) its own tars.
    :param transform: applied to the CutSet before tagging (e.g. WeNet's filters).
    :param split_kw: for shard lists, explicit ``rank``/``world_size``/``worker_id``/
        ``num_workers`` of the split (default: detected).
    :param shar_shards: for Shar, read exactly these shard indices, in this order (the
        caller's own split; ``shuffle_shards``/``split_for_dataloading`` are then unused).
    """
    if spec.type == "parquet":  # (issue 22) Parquet / datasets save_to_disk
        from wenet_lhotse.sources.parquet import LazyParquetCuts, ParquetColumns

        cuts = CutSet(LazyParquetCuts(spec.paths, ParquetColumns(**(spec.columns or {})),
                                      strict=strict, skip_report=skip_report))
        cuts = transform(cuts) if transform is not None else cuts
        return cuts.map(TagCuts(spec.tags)) if spec.tags else cuts
    if spec.type == "shar" and spec.fields is None and len(spec.paths) != 1:
        raise ValueError(f"source {spec.name}: a Shar source takes one directory")
    cuts = open_kind(spec.type, spec.paths, strict=strict, skip_report=skip_report,
                     shuffle_shards=shuffle_shards, seed=seed, epoch=epoch,
                     split_for_dataloading=split_for_dataloading, fields=spec.fields,
                     shar_shards=shar_shards, allow_pipe=allow_pipe or spec.allow_pipe,
                     **split_kw)
    if transform is not None:
        cuts = transform(cuts)
    if spec.tags:
        cuts = cuts.map(TagCuts(spec.tags))
    return cuts


def _chain(cutsets: Sequence[CutSet]) -> CutSet:
    out = cutsets[0]
    for cs in cutsets[1:]:
        out = out + cs
    return out


def mux_sources(
    cutsets: Sequence[CutSet],
    weights: Optional[Sequence[float]] = None,
    seed: int = 0,
    stop_early: bool = False,
    infinite: bool = False,
) -> CutSet:
    """Weighted mixing with Lhotse: ``CutSet.mux`` (ends when every source is
    exhausted, or at the first with ``stop_early``) or ``CutSet.infinite_mux``
    (never ends; sources are sampled with replacement). One source is returned as is."""
    if len(cutsets) == 1:
        return cutsets[0]
    weights = list(weights) if weights is not None else [1.0] * len(cutsets)
    if infinite:
        return CutSet.infinite_mux(*cutsets, weights=weights, seed=seed)
    return CutSet.mux(*cutsets, weights=weights, seed=seed, stop_early=stop_early)
