"""WeNet's ``dataset_conf`` (unchanged) plus our ``lhotse_conf`` section -> one typed config.

Every WeNet key keeps its meaning. ``batch_conf`` keeps WeNet's numbers by default
(``lhotse_conf.batch_by: wenet``): batches are drawn by Lhotse's bucketing sampler with a
sampling constraint from :mod:`wenet_lhotse.loader.constraints`:

* ``batch_type: static, batch_size: B`` -> exactly ``B`` utterances per batch (bucketed by
  duration, so padding stays low; only an epoch's last batch is smaller): as many steps
  per epoch as WeNet.
* ``batch_type: dynamic, max_frames_in_batch: F`` -> utterances x longest utterance in
  frames ``<= F``, frames counted after speed perturbation (a hard cap).
* ``batch_type: bucket, bucket_boundaries, bucket_batch_sizes`` -> WeNet's buckets (frames)
  and their batch sizes; the sampler's buckets are WeNet's.

``lhotse_conf.batch_by: duration`` (opt-in) instead gives a duration budget to Lhotse's
``TimeConstraint`` (``max_duration`` seconds of padded audio per batch):

* ``dynamic`` -> ``max_duration = F * frame_shift / 1000`` (``frame_shift`` from
  ``fbank_conf``/``mfcc_conf``, 10 ms by default);
* ``static`` -> ``max_duration = B * mean_duration``, the mean estimated from the metadata
  of the first cuts (no audio is read): about ``B`` utterances on average, more short
  ones and fewer long ones, least padding;
* ``bucket`` -> ``max_duration = mean_i(bucket_batch_sizes[i] * boundary_i) *
  frame_shift / 1000`` (the last size uses the last boundary).

``lhotse_conf.max_duration`` sets the budget directly (and implies ``batch_by: duration``).
``shuffle`` (bool) -> sampler shuffling; ``shuffle_conf.shuffle_size`` -> a lower bound on
the sampler's ``buffer_size``; ``sort``/``sort_conf`` are not needed (bucketing groups
similar durations) and are ignored.

The ``lhotse_conf`` section (our keys, all optional: ``sources``, ``max_duration``,
``mode``, ``fault_tolerant``, ...) is :class:`~wenet_lhotse.loader.lhotse_conf.LhotseConf`,
whose module lists every key with its default.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Optional

from wenet_lhotse.dataset.filters import FilterConf
from wenet_lhotse.dataset.splits import SplitRules, split_rules
from wenet_lhotse.errors import SkipReport
from wenet_lhotse.io.policy import ReadPolicy
from wenet_lhotse.loader.lhotse_conf import LhotseConf
from wenet_lhotse.loader.schema import BATCH_TYPES, WENET_BATCH_CONF

logger = logging.getLogger(__name__)


@dataclass
class BatchingConfig:
    """How batches are formed, resolved from ``batch_conf`` and ``lhotse_conf``.

    ``by == "wenet"``: ``batch_conf`` (WeNet's, validated) gives the sampling constraint
    (:func:`~wenet_lhotse.loader.constraints.wenet_constraint`). ``by == "duration"``:
    exactly one of ``max_duration`` (seconds) or ``static_batch_size`` (to be turned into
    seconds with the mean duration, see :meth:`resolve`) is set.
    """

    by: str = "wenet"
    batch_conf: Dict[str, Any] = field(default_factory=dict)
    max_duration: Optional[float] = None
    static_batch_size: Optional[int] = None
    max_cuts: Optional[int] = None
    formula: str = ""

    def resolve(self, mean_duration: float) -> Optional[float]:
        """The duration budget in seconds (``None`` when batching by WeNet's numbers),
        given the data's mean cut duration (seconds). The config is not changed (it may be
        shared between splits)."""
        if self.by == "wenet":
            return None
        if self.max_duration is not None:
            return self.max_duration
        return self.static_batch_size * mean_duration

    def explain(self, mean_duration: float) -> str:
        """How batches are formed, for logs."""
        if self.by == "wenet" or self.max_duration is not None:
            return self.formula
        return (f"batch_size {self.static_batch_size} x mean duration "
                f"{mean_duration:.2f} s = {self.resolve(mean_duration):.1f} s")

    def utterances_per_batch(self, mean_duration: float, frame_shift_ms: float = 10.0) -> float:
        """About how many utterances of ``mean_duration`` seconds a batch holds (sizes
        the number of buckets of a small data set)."""
        if self.by == "duration":
            return max(1.0, (self.resolve(mean_duration) or 0.0) / max(mean_duration, 1e-6))
        bc = self.batch_conf
        if bc["batch_type"] == "static":
            return float(bc["batch_size"])
        if bc["batch_type"] == "dynamic":
            frames = mean_duration * 1000.0 / frame_shift_ms
            return max(1.0, bc["max_frames_in_batch"] / max(frames, 1.0))
        return float(sum(bc["bucket_batch_sizes"]) / len(bc["bucket_batch_sizes"]))


@dataclass
class LoaderConfig:
    """Everything the builder needs, from one WeNet ``dataset_conf``."""

    dataset_conf: Dict[str, Any]
    lhotse: LhotseConf
    batching: BatchingConfig
    shuffle: bool
    buffer_size: int
    frame_shift_ms: float = 10.0
    #: WeNet's ``cycle``: passes over the data per epoch (train only)
    cycle: int = 1
    #: WeNet's ``list_shuffle``: reshuffle the list's lines / tars each pass (train only),
    #: with a buffer of ``list_shuffle_size`` items (None: a full permutation)
    list_shuffle: bool = False
    list_shuffle_size: Optional[int] = None
    extra: Dict[str, Any] = field(default_factory=dict)
    #: the split's rules (:func:`~wenet_lhotse.dataset.splits.split_rules`)
    rules: SplitRules = field(default_factory=lambda: split_rules("train"))
    #: WeNet's ``filter_conf`` (its defaults filled in) where the split filters, else None
    filter_conf: Optional[FilterConf] = None

    @property
    def split(self) -> str:
        return self.rules.name

    def read_policy(self, skip_report: Optional[SkipReport] = None) -> ReadPolicy:
        """The loader's ONE read policy (:meth:`LhotseConf.read_policy`)."""
        return self.lhotse.read_policy(skip_report)

    def for_split(self, split: str) -> LoaderConfig:
        """This ``dataset_conf`` read for ``split`` (``train``, ``cv`` or ``infer``): the one
        place where splits differ (:class:`~wenet_lhotse.dataset.splits.SplitRules`)."""
        return LoaderConfig.from_wenet(self.dataset_conf, split)

    @classmethod
    def from_wenet(cls, dataset_conf: Optional[Mapping[str, Any]], split: str = "train"
                   ) -> LoaderConfig:
        """Read WeNet's ``dataset_conf`` (plus ``lhotse_conf`` inside it, if any).

        Outside training (``split`` cv or infer) shuffling is off and ``cycle`` is 1
        (WeNet's cv): see :meth:`for_split`.
        """
        rules = split_rules(split)
        conf = dict(dataset_conf or {})
        lconf = LhotseConf.from_dict(conf.get("lhotse_conf"))
        shift = frame_shift_ms(conf)
        batching = batching_from_wenet(conf.get("batch_conf"), lconf, shift)
        shuffle = bool(conf.get("shuffle", True)) and rules.shuffle
        shuffle_size = int((conf.get("shuffle_conf") or {}).get("shuffle_size", 0) or 0)
        buffer_size = max(lconf.buffer_size, shuffle_size)
        cycle = int(conf.get("cycle", 1) or 1)
        if cycle < 1:
            raise ValueError(f"dataset_conf.cycle must be >= 1, got {cycle}")
        cycle = cycle if rules.shuffle else 1
        list_shuffle = bool(conf.get("list_shuffle", True)) and rules.shuffle
        list_size = (conf.get("list_shuffle_conf") or {}).get("shuffle_size")
        return cls(dataset_conf=conf, lhotse=lconf, batching=batching, shuffle=shuffle,
                   buffer_size=buffer_size, frame_shift_ms=shift, cycle=cycle,
                   list_shuffle=list_shuffle,
                   list_shuffle_size=int(list_size) if list_size is not None else None,
                   rules=rules,
                   filter_conf=FilterConf.from_dict(conf.get("filter_conf")) if rules.filter
                   else None)


def frame_shift_ms(dataset_conf: Mapping[str, Any]) -> float:
    """Feature frame shift (ms) from ``fbank_conf``/``mfcc_conf`` (WeNet's default 10)."""
    for section in ("fbank_conf", "mfcc_conf"):
        sub = dataset_conf.get(section)
        if sub and "frame_shift" in sub:
            return float(sub["frame_shift"])
    return 10.0


def batch_value(name: str, value: Any) -> int:
    """``value`` of ``batch_conf.<name>`` as a positive int (16.0 is 16); ValueError
    naming the key otherwise. The one check of batch sizes and frame caps (the sampling
    constraints use it too)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or int(value) != value or value < 1:
        raise ValueError(f"dataset_conf.batch_conf.{name}: must be a positive integer, "
                         f"got {value!r}")
    return int(value)


def wenet_batch_conf(batch_conf: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
    """WeNet's ``batch_conf`` with WeNet's defaults
    (:data:`~wenet_lhotse.loader.schema.WENET_BATCH_CONF`) filled in and values checked;
    errors name the key (``dataset_conf.batch_conf.<key>``).

    >>> wenet_batch_conf({"batch_type": "dynamic"})
    {'batch_type': 'dynamic', 'max_frames_in_batch': 12000}
    """
    bc = dict(batch_conf or {})
    btype = bc.setdefault("batch_type", WENET_BATCH_CONF["batch_type"][0])

    def value(name: str) -> int:
        return batch_value(name, bc.get(name, WENET_BATCH_CONF[name][0]))

    if btype == "static":
        bc["batch_size"] = value("batch_size")
    elif btype == "dynamic":
        bc["max_frames_in_batch"] = value("max_frames_in_batch")
    elif btype == "bucket":
        where = "dataset_conf.batch_conf"
        bounds = bc.get("bucket_boundaries")
        sizes = bc.get("bucket_batch_sizes")
        if not isinstance(bounds, (list, tuple)) or not bounds:
            raise ValueError(f"{where}.bucket_boundaries: a non-empty list of frame counts "
                             f"is needed for batch_type bucket, got {bounds!r}")
        if not isinstance(sizes, (list, tuple)) or len(sizes) != len(bounds) + 1:
            raise ValueError(f"{where}.bucket_batch_sizes: one more entry than "
                             f"bucket_boundaries ({len(bounds) + 1}) is needed, got {sizes!r}")
        bc["bucket_boundaries"] = [batch_value("bucket_boundaries", b) for b in bounds]
        bc["bucket_batch_sizes"] = [batch_value("bucket_batch_sizes", b) for b in sizes]
        if bc["bucket_boundaries"] != sorted(bc["bucket_boundaries"]):
            raise ValueError(f"{where}.bucket_boundaries: must be ascending, got {bounds!r}")
    else:
        raise ValueError(f"dataset_conf.batch_conf.batch_type: unknown value {btype!r}; "
                         f"use {', '.join(BATCH_TYPES)}")
    return bc


def batching_from_wenet(batch_conf: Optional[Mapping[str, Any]], lconf: LhotseConf,
                        frame_shift: float = 10.0) -> BatchingConfig:
    """Translate WeNet's ``batch_conf`` (see the module docstring)."""
    bc = wenet_batch_conf(batch_conf)
    if lconf.max_duration is not None:
        return BatchingConfig(by="duration", batch_conf=bc,
                              max_duration=float(lconf.max_duration), max_cuts=lconf.max_cuts,
                              formula=f"lhotse_conf.max_duration = {lconf.max_duration} s")
    if lconf.batch_by == "wenet":
        return BatchingConfig(by="wenet", batch_conf=bc, max_cuts=lconf.max_cuts,
                              formula=_describe(bc))
    btype = bc["batch_type"]
    if btype == "dynamic":
        frames = float(bc["max_frames_in_batch"])
        secs = frames * frame_shift / 1000.0
        return BatchingConfig(by="duration", batch_conf=bc, max_duration=secs,
                              max_cuts=lconf.max_cuts,
                              formula=f"max_frames_in_batch {frames:g} x {frame_shift:g} ms "
                                      f"= {secs:.1f} s")
    if btype == "static":
        return BatchingConfig(by="duration", batch_conf=bc,
                              static_batch_size=bc["batch_size"], max_cuts=lconf.max_cuts)
    bounds, sizes = bc["bucket_boundaries"], bc["bucket_batch_sizes"]
    edges = bounds + [bounds[-1]]
    frames = sum(s * b for s, b in zip(sizes, edges)) / len(sizes)
    secs = frames * frame_shift / 1000.0
    return BatchingConfig(by="duration", batch_conf=bc, max_duration=secs,
                          max_cuts=lconf.max_cuts,
                          formula=f"mean(bucket_batch_sizes x boundaries) {frames:.0f} "
                                  f"frames x {frame_shift:g} ms = {secs:.1f} s")


def _describe(bc: Mapping[str, Any]) -> str:
    if bc["batch_type"] == "static":
        return f"static: {bc['batch_size']} utterances per batch"
    if bc["batch_type"] == "dynamic":
        return f"dynamic: <= {bc['max_frames_in_batch']} padded frames per batch"
    return (f"bucket: boundaries {bc['bucket_boundaries']} frames, "
            f"batch sizes {bc['bucket_batch_sizes']}")
