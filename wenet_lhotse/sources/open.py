"""Open any input as a lazy Lhotse ``CutSet``: each kind opens its own
(:mod:`wenet_lhotse.sources.registry`), behind the three ways in (a path:
:func:`open_cuts`; a yaml source: :func:`open_source`; WeNet lists:
:func:`read_wenet_list`), plus source tags (:class:`TagCuts`) and weighted
mixing with Lhotse's ``CutSet.mux`` (:func:`mux_sources`).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from lhotse import CutSet
from lhotse.utils import Pathlike

from wenet_lhotse.io.policy import ReadPolicy
from wenet_lhotse.io.remote import is_remote
from wenet_lhotse.io.streams import as_path_list
from wenet_lhotse.sources.detect import WENET_KINDS, detect_data_type, detect_input_kind
from wenet_lhotse.sources.kinds.shar import cuts_only as shar_cuts_only
from wenet_lhotse.sources.kinds.shar import spec_fields
from wenet_lhotse.sources.registry import get_kind
from wenet_lhotse.sources.shar_dir import shar_fields
from wenet_lhotse.sources.spec import SourceSpec


def open_kind(
    kind: str,
    paths: Sequence[str],
    *,
    policy: Optional[ReadPolicy] = None,
    **kw: Any,
) -> CutSet:
    """Open ``paths`` as the registered kind ``kind``
    (:meth:`~wenet_lhotse.sources.kinds.base.InputKind.open`; see :func:`open_cuts` /
    :func:`open_source` for the arguments). ``policy``: how bad input and ``pipe:`` inputs are
    treated;
    ``kw``: ``wav_root``, ``with_audio``, ``shuffle_shards``, ``seed``, ``epoch``,
    ``split_for_dataloading``, ``fields`` (a Shar source given by URLs), ``shar_shards``
    and the shard split's ``rank``/``world_size``/``worker_id``/``num_workers``."""
    policy = (policy or ReadPolicy())
    return get_kind(kind).open(list(paths), policy, **kw)


def open_cuts(
    path: Pathlike,
    *,
    kind: str = "auto",
    with_audio: bool = True,
    wav_root: Optional[Pathlike] = None,
    policy: Optional[ReadPolicy] = None,
) -> Tuple[CutSet, str]:
    """Open ``path`` lazily as a CutSet; returns ``(cuts, kind)``.

    :param kind: one of :data:`~wenet_lhotse.sources.detect.KINDS` or ``"auto"`` (detected).
    :param with_audio: for Shar, False reads only the cut manifests (no tars).
    :param wav_root: for raw lists, the directory relative ``wav`` paths resolve
        against (default: the working directory, as WeNet does).
    :param policy: how to read (:class:`~wenet_lhotse.io.policy.ReadPolicy`; default:
        strict, no ``pipe:``).
    """
    if kind == "auto":
        kind = detect_input_kind(path)
    return open_kind(kind, [str(path)], policy=policy, with_audio=with_audio,
                     wav_root=wav_root), kind


def read_shar(in_dir: Pathlike, *, with_audio: bool = True) -> CutSet:
    """Open a Shar directory lazily; ``with_audio=False`` reads only the cut manifests
    (no tar is opened), which is what statistics need."""
    if with_audio:
        if is_remote(str(in_dir)):
            return CutSet.from_shar(fields=shar_fields(in_dir))
        return CutSet.from_shar(in_dir=in_dir)
    return shar_cuts_only(in_dir)


def read_wenet_list(
    paths: Union[Pathlike, Sequence[Pathlike]], data_type: str = "auto", **kwargs: Any
) -> CutSet:
    """Open WeNet list(s) as a lazy CutSet: :func:`~wenet_lhotse.formats.read_raw_list`
    for ``"raw"``, :func:`~wenet_lhotse.formats.read_shard_list` for ``"shard"`` (the
    ``reader`` of each WeNet kind); ``"auto"`` decides per file from its content (all
    files must agree). ``kwargs`` go to that reader."""
    if data_type == "shards":
        data_type = "shard"
    if data_type not in ("auto", *WENET_KINDS):
        raise ValueError(f"data_type must be one of {('auto', *WENET_KINDS)}, "
                         f"got {data_type!r}")
    files = as_path_list(paths)
    if data_type == "auto":
        kinds = {p: detect_data_type(p) for p in files}
        if len(set(kinds.values())) > 1:
            raise ValueError(f"lists of different types given together: {kinds}")
        data_type = next(iter(kinds.values()), WENET_KINDS[0])
    reader = get_kind(data_type).reader
    assert reader is not None
    return reader(files, **kwargs)


def spec_shar_fields(spec: SourceSpec) -> Dict[str, List[str]]:
    """``{field: [path or URL per shard]}`` of a Shar source: its ``fields``, or the
    files of its directory by shard index
    (:func:`~wenet_lhotse.sources.shar_dir.shar_fields`)."""
    return spec_fields(spec)


def open_source(
    spec: SourceSpec,
    *,
    shuffle_shards: bool = False,
    seed: int = 0,
    epoch: int = 0,
    split_for_dataloading: bool = False,
    transform: Optional[Callable[[CutSet], CutSet]] = None,
    shar_shards: Optional[Sequence[int]] = None,
    policy: Optional[ReadPolicy] = None,
    **split_kw: Any,
) -> CutSet:
    """Open ``spec`` as a lazy CutSet with its tags attached (no audio is decoded), as
    its kind opens it (:meth:`~wenet_lhotse.sources.kinds.base.InputKind.open_source`).

    :param shuffle_shards: shuffle the order of tars (shard/Shar) with ``seed + epoch``.
    :param split_for_dataloading: give each (rank, DataLoader worker) its own tars.
    :param transform: applied to the CutSet before tagging (e.g. WeNet's filters).
    :param split_kw: for shard lists, explicit ``rank``/``world_size``/``worker_id``/
        ``num_workers`` of the split (default: detected).
    :param shar_shards: for Shar, read exactly these shard indices, in this order (the
        caller's own split; ``shuffle_shards``/``split_for_dataloading`` are then unused).
    :param policy: how to read (:class:`~wenet_lhotse.io.policy.ReadPolicy`; default:
        strict, no shell commands from the data).
    """
    policy = (policy or ReadPolicy())
    return get_kind(spec.type).open_tagged(
        spec, policy, transform, shuffle_shards=shuffle_shards, seed=seed, epoch=epoch,
        split_for_dataloading=split_for_dataloading, shar_shards=shar_shards, **split_kw)


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
