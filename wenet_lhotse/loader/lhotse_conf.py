"""Our ``lhotse_conf`` section of WeNet's ``dataset_conf`` -> :class:`LhotseConf`, typed.

WeNet has no such section: its own ``dataset_conf`` keys keep their meaning
(:mod:`wenet_lhotse.loader.config` reads them and this section into one
``LoaderConfig``); every key here is ours and has its row in docs/migration.md's table
of improvements (the drop-in's defaults for some are ``dropin.compat``'s
``WENET_LHOTSE_DEFAULTS``). Each key's type, default and check are
declared once, on :class:`LhotseConf`'s fields; an unknown key or a bad value is a
:class:`~wenet_lhotse.errors.WenetConfigError` naming ``lhotse_conf.<key>``.

``lhotse_conf`` (new, all optional)::

    lhotse_conf:
      sources:                 # instead of --train_data: weighted, tagged sources
        - {path: data/a/cuts.jsonl.gz, type: cuts, weight: 2, tags: {lang: zh}}
        - {path: data/b/shards.list, type: shard, weight: 1, tags: {lang: en}}
        - {fields: {cuts: [...], recording: [...]}}   # Shar on object storage (URLs)
      cv_sources: [...]        # instead of --cv_data
      batch_by: wenet          # wenet: batch_conf's numbers | duration: a seconds budget
      max_duration: 200        # seconds of padded audio per batch (implies batch_by: duration)
      max_cuts: null           # optional cap on utterances per batch
      num_buckets: 30
      duration_bins: null      # explicit bucket edges (seconds); else from metadata
      num_cuts_for_bins_estimate: 5000
      quadratic_duration: null # seconds; set 15-40 for transformer-heavy models
      buffer_size: 20000       # cuts held by the bucketing sampler
      mode: auto               # auto | map | streamed
      mux_stop_early: false    # end the epoch when the first source is exhausted
      pool_workers: 0          # feature threads inside each DataLoader worker
      fault_tolerant: false    # skip (and count) unreadable items instead of raising
      allow_pipe: false        # run 'pipe:' lines / 'command' sources of the data (shell)
      url_protocols: null      # URL protocols read besides the defaults, e.g. [ftp]
      max_line_bytes: null     # longest list/manifest/text line (default 16 MiB)
      steps_per_epoch: null    # streamed mode: fixed steps per epoch (else: first rank out)
      equal_steps: true        # streamed train under DDP: every rank stops at the step the
                               # first runs out (the rest counted as left over); false:
                               # each rank trains all its data, uneven steps, for a loop
                               # that joins (WeNet's torch_ddp; the drop-in's default there)
      snapshot_depth: 64       # batches of resume state kept (>= prefetch depth)
      resume_loader: true      # python -m wenet_lhotse.dropin.train: loader state saved
                               # beside each checkpoint, restored by --checkpoint (false:
                               # WeNet's replay of the epoch)
      return_pcm: false        # add pcm / pcm_length (the waveform) to each batch
      probe_cache: false       # raw lists: probe headers once across ranks, cache them
                               # beside the list (true) or in this directory
      shard_index: auto        # shard lists: sample through the index `wenet-lhotse index`
                               # wrote beside the list (auto: when there is one; true:
                               # required), or in this directory; false: always stream
      index_first_pass: false  # shard lists without an index: the streamed first epoch
                               # writes it, later epochs sample through it (first_pass)
      read_window_mb: null     # indexed shards: read the epoch in windows of tars of this
                               # many MiB, shuffled within each (sources.window_order);
                               # remote tars fetched whole, one window ahead
      features_on: worker      # worker | device: DataLoader workers send waveforms (int16
                               # for 16-bit audio), the training process computes dither,
                               # fbank/mfcc and spec_* batched on `device`
      device: null             # for features_on: device; default: the current CUDA
                               # device when CUDA is available, else cpu
      cv_partition: true       # split cv across ranks (false: all on every rank, as WeNet;
                               # the default under the init_dataset_and_dataloader drop-in)
      lang_from_data: false    # langs from the data's own language (a raw line's lang)
                               # before WeNet's langid, which ignores it
      cv_dither: wenet         # wenet: the yaml's dither in cv, new noise every pass |
                               # fixed: the same noise every pass | off: no dither in cv
      progress_every: 100      # training: a progress line (ETA) every N batches; 0: off
      mix_by: cut              # cut: CutSet.mux before one sampler | batch: draw the source
                               # of each batch (automatic with text / speech-only sources)
      max_tokens_in_batch: null  # text batches: padded tokens per batch (text sources)
      reweight_temperature: null # w_i**T / sum w_j**T per level of source groups (NeMo's)
      bucket_bins_2d: null     # [[max s, max tokens], ...] (estimate-bins): 2D buckets,
      bucket_batch_sizes_2d: null  # one batch size each (map-style training); null:
                               # from max_duration (and bucket_max_tokens_2d)
      bucket_strict_2d: false  # true: a cut's bin within its own duration bucket (NeMo's
                               # strict_2d); false: the first bin holding it
      bucket_max_tokens_2d: null # padded output tokens per 2D batch (a cap on every batch)
      min_tps: null            # 2D buckets: drop cuts under this many tokens per second
      max_tps: null            # ... over this (a number, or one per bin as estimate-bins
                               # prints); dropped cuts are counted as filtered
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, List, Mapping, Optional

from wenet_lhotse.errors import SkipReport, WenetConfigError
from wenet_lhotse.features.device import FEATURES_ON
from wenet_lhotse.io.policy import ReadPolicy
from wenet_lhotse.loader.schema import (
    anything,
    boolean_or_dir,
    choice,
    field_rules,
    integer,
    key,
    list_of,
    number,
    optional,
    problem,
    string,
    torch_device,
)

MODES = ("auto", "map", "streamed")
CV_DITHER = ("wenet", "fixed", "off")
BATCH_BY = ("wenet", "duration")
MIX_BY = ("cut", "batch")


_SIZE, _COUNT, _SECONDS = integer(1), integer(0), number(positive=True)


def _seconds_or_list(v: Any) -> Optional[str]:
    """A positive number, or a list of them (``max_tps``: one per 2D bin)."""
    return list_of(_SECONDS, 1)(v) if isinstance(v, list) else _SECONDS(v)


@dataclass
class LhotseConf:
    """The ``lhotse_conf`` section (see the module docstring for each key): each key's
    type, default and (where its type says too little) check, declared once; adding a
    key is one line here (and its row in docs/migration.md).

    >>> LhotseConf.from_dict({"max_duration": 200}).max_duration
    200
    >>> LhotseConf.from_dict({"num_buckets": 0})
    Traceback (most recent call last):
    ...
    wenet_lhotse.errors.WenetConfigError: lhotse_conf.num_buckets: expected an integer >= 1, got 0
    """

    sources: Optional[List[Any]] = key(None, optional(list_of(anything, 1)))
    cv_sources: Optional[List[Any]] = key(None, optional(list_of(anything, 1)))
    batch_by: str = key("wenet", choice(*BATCH_BY))
    max_duration: Optional[float] = key(None, optional(_SECONDS))
    max_cuts: Optional[int] = key(None, optional(_SIZE))
    num_buckets: int = key(30, _SIZE)
    duration_bins: Optional[List[float]] = key(None, optional(list_of(_SECONDS, 1)))
    num_cuts_for_bins_estimate: int = key(5000, _SIZE)
    quadratic_duration: Optional[float] = key(None, optional(_SECONDS))
    buffer_size: int = key(20000, _SIZE)
    mode: str = key("auto", choice(*MODES))
    mux_stop_early: bool = False
    pool_workers: int = key(0, _COUNT)
    fault_tolerant: bool = False
    allow_pipe: bool = False
    url_protocols: Optional[List[str]] = key(None, optional(list_of(string, 1)))
    max_line_bytes: Optional[int] = key(None, optional(_SIZE))
    steps_per_epoch: Optional[int] = key(None, optional(_SIZE))
    equal_steps: bool = True
    resume_loader: bool = True
    snapshot_depth: int = key(64, _SIZE)
    return_pcm: bool = False
    cv_partition: bool = True
    lang_from_data: bool = False
    probe_cache: Any = key(False, boolean_or_dir)
    shard_index: Any = key("auto", boolean_or_dir)
    index_first_pass: bool = False  # the streamed first epoch writes the index (loader.first_pass)
    read_window_mb: Optional[float] = key(None, optional(_SECONDS))
    cv_dither: str = key("wenet", choice(*CV_DITHER))
    features_on: str = key("worker", choice(*FEATURES_ON))
    device: Optional[str] = key(None, optional(torch_device))
    # -- mixing by batch: text / speech-only sources, 2D buckets (issue 22; loader.mixed)
    mix_by: str = key("cut", choice(*MIX_BY))
    max_tokens_in_batch: Optional[int] = key(None, optional(_SIZE))
    reweight_temperature: Any = None
    bucket_bins_2d: Optional[List[Any]] = key(None, optional(list_of(anything, 1)))
    bucket_batch_sizes_2d: Optional[List[int]] = key(None, optional(list_of(_SIZE, 1)))
    # -- 2D buckets as tight as NeMo's, no batch over its caps (issue 31; loader.constraint2d)
    bucket_strict_2d: bool = False
    bucket_max_tokens_2d: Optional[int] = key(None, optional(_SIZE))
    min_tps: Optional[float] = key(None, optional(number(minimum=0)))
    max_tps: Any = key(None, optional(_seconds_or_list))
    progress_every: int = key(100, _COUNT)  # a progress line every N train batches (0: off)

    @classmethod
    def from_dict(cls, conf: Optional[Mapping[str, Any]]) -> LhotseConf:
        """The typed section; :class:`~wenet_lhotse.errors.WenetConfigError` (a
        ``ValueError``) naming the key for an unknown key or a bad value."""
        conf = dict(conf or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(conf) - known)
        if unknown:
            raise WenetConfigError("lhotse_conf", f"unknown lhotse_conf keys {unknown}; "
                                                  f"known: {sorted(known)}")
        rules = field_rules(cls)
        for name, value in conf.items():
            bad = problem(rules, name, value)
            if bad:
                raise WenetConfigError(f"lhotse_conf.{name}", bad)
        return cls(**conf)

    @staticmethod
    def with_opt_ins(conf: Optional[Mapping[str, Any]], policy: ReadPolicy) -> dict:
        """A yaml ``lhotse_conf`` mapping (not validated here) with the opt-ins that
        ``policy`` (e.g. a CLI command's flags) grants added: the inverse of
        :meth:`read_policy` for what a flag may loosen (running the data's commands).
        The yaml's own opt-ins are kept; nothing is taken away.

        >>> LhotseConf.with_opt_ins({"seed": 1}, ReadPolicy(allow_pipe=True))
        {'seed': 1, 'allow_pipe': True}
        >>> LhotseConf.with_opt_ins({"seed": 1}, ReadPolicy())
        {'seed': 1}
        """
        conf = dict(conf or {})
        if policy.allow_pipe:
            conf["allow_pipe"] = True
        return conf

    def read_policy(self, skip_report: Optional[SkipReport] = None) -> ReadPolicy:
        """How this loader reads its data, in one object: ``fault_tolerant`` (skip and
        record into ``skip_report`` instead of raising), ``allow_pipe`` and
        ``url_protocols`` (added to ``$WENET_LHOTSE_URL_PROTOCOLS``'s).

        >>> p = LhotseConf.from_dict({"fault_tolerant": True, "url_protocols": ["ftp"]})
        >>> p.read_policy().strict, sorted(p.read_policy().url_protocols)
        (False, ['ftp'])
        """
        return ReadPolicy(strict=not self.fault_tolerant, skip_report=skip_report,
                          allow_pipe=self.allow_pipe,
                          url_protocols=frozenset(self.url_protocols or ()) or None,
                          max_line_bytes=self.max_line_bytes)

