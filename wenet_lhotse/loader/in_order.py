"""WeNet's deterministic order: with ``shuffle``, ``sort`` and ``list_shuffle`` all off and
``batch_type: static`` (or ``dynamic`` without ``speed_perturb``), WeNet batches its list in
order, and so does the drop-in.

WeNet's split (``wenet/dataset/datapipes.py``: ``ShardDataPipe`` on the list's lines after
``repeat(cycle)``, sharded by torch's DataLoader in the ``DISTRIBUTED`` then
``MULTIPROCESSING`` groups): line ``i`` goes to the instance ``i % (world_size *
num_workers)``, instance ``worker * world_size + rank`` -- the lines ``[rank::world_size]``,
then ``[worker::num_workers]`` of those (:func:`~wenet_lhotse.formats.split.reader_share`'s
split). Each instance filters
(``filter_conf``) and batches its own lines in order (``batch_size`` consecutive lines;
dynamic: WeNet's ``DynamicBatchWindow``, a batch ends before the utterance whose frames
would bring ``longest * count`` over ``max_frames_in_batch``, on the frames the feature
pipeline gives, :mod:`.lengths`);
torch's DataLoader hands out the workers' batches round robin (worker 0's first, worker 1's
first, ..., worker 0's second, ...), skipping a worker once it has no more. With
``num_workers: 0`` the rank is the only instance of its DataLoader.

:func:`plan_in_order` plans exactly those batches for one rank from the source's cuts:
the same batches, in the same order, as WeNet's own loader, every epoch (no randomness).
The plan holds this rank's cuts (metadata, as a cv plan does). Differences from the
bucketing loader: no equal steps across ranks (WeNet's executor joins uneven ranks), and
no ``state_dict`` resume within an epoch (the plan restarts each epoch).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, List, Mapping, Optional

from lhotse import CutSet
from lhotse.cut import Cut


def wants_in_order(dataset_conf: Mapping[str, Any], split: str, num_sources: int,
                   shuffle: bool, list_shuffle: bool, by: str) -> bool:
    """WeNet's in-order batching applies: a training split of one source, ``shuffle``,
    ``sort`` and ``list_shuffle`` all off, WeNet's ``batch_conf`` (not
    ``lhotse_conf.max_duration``: ``by == "wenet"``) with static batches, or dynamic ones
    without speed perturbation (WeNet draws its speeds at random: no batch-for-batch
    match, and a plan fixed for all epochs could not hold the frame cap)."""
    batch_type = (dataset_conf.get("batch_conf") or {}).get("batch_type", "static")
    if batch_type == "dynamic" and dataset_conf.get("speed_perturb", False):
        return False
    return (split == "train" and num_sources == 1 and not shuffle and not list_shuffle
            and not dataset_conf.get("sort", True) and by == "wenet"
            and batch_type in ("static", "dynamic"))


def static_batches(batch_size: int) -> Callable[[List[Cut]], List[List[Cut]]]:
    """WeNet's ``batch(batch_size)``: consecutive groups, the last one smaller."""
    return lambda cuts: [cuts[i:i + batch_size] for i in range(0, len(cuts), batch_size)]


def dynamic_batches(max_frames_in_batch: int, frames: Callable[[Cut], int]
                    ) -> Callable[[List[Cut]], List[List[Cut]]]:
    """WeNet's ``dynamic_batch(DynamicBatchWindow(max_frames_in_batch))`` on
    ``frames(cut)`` (the feature frames of the cut)."""
    def batch(cuts: List[Cut]) -> List[List[Cut]]:
        out: List[List[Cut]] = []
        buf: List[Cut] = []
        longest = 0
        for cut in cuts:
            n = frames(cut)
            longest = max(longest, n)
            if longest * (len(buf) + 1) > max_frames_in_batch:
                longest = n
                if buf:
                    out.append(buf)
                buf = [cut]
            else:
                buf.append(cut)
        if buf:
            out.append(buf)
        return out
    return batch


def worker_shares(cuts: Iterable[Cut], world_size: int, rank: int,
                  num_workers: int) -> List[List[Cut]]:
    """This rank's cuts, one list per DataLoader worker, as WeNet's sharding splits the
    lines (see the module docstring). ``num_workers`` 0 counts as one instance."""
    workers = max(1, num_workers)
    instances = world_size * workers
    shares: List[List[Cut]] = [[] for _ in range(workers)]
    for i, cut in enumerate(cuts):
        instance = i % instances
        if instance % world_size == rank:
            shares[instance // world_size].append(cut)
    return shares


def in_order_batcher(cfg: Any, seed: int) -> Callable[[List[Cut]], List[List[Cut]]]:
    """The batcher of a :class:`~.config.LoaderConfig`'s WeNet ``batch_conf``."""
    bc = cfg.batching.batch_conf
    if bc["batch_type"] == "static":
        return static_batches(int(bc["batch_size"]))
    from wenet_lhotse.features.recipe import cut_lengths_from_wenet_conf

    lengths = cut_lengths_from_wenet_conf(cfg.dataset_conf, train=True, seed=seed)
    return dynamic_batches(int(bc["max_frames_in_batch"]), lengths.frames)


def plan_in_order(cuts: Iterable[Cut], transform: Optional[Callable[[CutSet], CutSet]],
                  batcher: Callable[[List[Cut]], List[List[Cut]]], world_size: int,
                  rank: int, num_workers: int) -> List[CutSet]:
    """The rank's batches in WeNet's order: lines split over (rank, worker) instances,
    each instance's lines through ``transform`` (WeNet's filters) and ``batcher``
    (:func:`static_batches`, :func:`dynamic_batches`), the workers' batches taken round
    robin."""
    per_worker: List[List[List[Cut]]] = []
    for share in worker_shares(cuts, world_size, rank, num_workers):
        kept = list(transform(CutSet(share))) if transform is not None else share
        per_worker.append(batcher(kept))
    batches: List[CutSet] = []
    for j in range(max((len(b) for b in per_worker), default=0)):
        batches.extend(CutSet.from_cuts(b[j]) for b in per_worker if j < len(b))
    return batches
