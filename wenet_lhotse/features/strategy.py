"""The input strategy: :class:`PooledFeatures` takes a ``CutSet`` batch and returns
padded features and lengths, like Lhotse's ``OnTheFlyFeatures``, computing the per-cut
recipe (:mod:`.pipeline`) in the calling process or in a :class:`~.pool.WorkerPool`.
Padding is Lhotse's ``collate_matrices``/``collate_vectors`` (zeros).

With ``features_on="device"`` the ``feats`` slot holds a
:class:`~.device.WaveBatch` (waveforms and the cuts' random draws) and ``feats_lens``
the frame counts the training process will compute (:class:`~.device.DeviceFeatures`).
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from lhotse import CutSet
from lhotse.dataset.collation import collate_matrices, collate_vectors
from lhotse.features.base import FeatureExtractor

from wenet_lhotse.errors import SkipReport, WenetDataError
from wenet_lhotse.features.augmentations import AUGMENTATIONS
from wenet_lhotse.features.device import FEATURES_ON, WaveBatch, check_extractor
from wenet_lhotse.features.pipeline import CutPipeline, one_torch_thread
from wenet_lhotse.features.pool import WorkerPool
from wenet_lhotse.features.recipe import FeatureRecipe, cut_seed


class PooledBatch(NamedTuple):
    """What :meth:`PooledFeatures.__call__` returns (unpacks as a 4-tuple)."""

    feats: Any  # (B, T_max, F) float32 tensor padded with 0.0, or a device.WaveBatch;
    #             from ``unpadded``: a list of (T, F) float32 arrays
    feats_lens: torch.Tensor  # (B,) int32, frames
    cuts: CutSet  # the cuts kept, in output order
    audio: Any  # ((B, S_max) float32, (B,) int32); from ``unpadded``: (S,) float32 arrays


class PooledFeatures:
    """Pooled on-the-fly feature extraction with WeNet's augmentations.

    :param extractor: a Lhotse feature extractor; default ``WenetFbank()`` (80 bins).
        :class:`~wenet_lhotse.features.fbank.WenetFbank` & co. get per-cut dither noise.
    :param num_workers: worker processes; ``0`` (default) computes in the calling process.
        Measured (docs/performance.md): per CPU second the pool does ~20% less work than
        in-process extraction (cuts and features cross process boundaries), so
        DataLoader workers are the cheaper way to use cores when there are enough
        batches/shards to spread; a pool pays off when they cannot (one shard, few
        DataLoader workers because of shared-memory limits).
    :param speed_perturb: ``None``/``False`` (off), ``True`` (WeNet's 0.9/1.0/1.1) or a
        list of factors, one drawn uniformly per cut.
    :param resample_to: target sampling rate in Hz before everything else (``None``: keep).
    :param seed: base seed; a cut's randomness depends only on (seed, epoch, cut id).
    :param fault_tolerant: drop a failing cut (logged, counted in :attr:`skip_report`)
        instead of raising its :class:`~wenet_lhotse.errors.WenetDataError`.
    :param return_audio: also return the waveform the features were computed from.
    :param start_method: multiprocessing start method; default ``fork`` where
        available (cheap; workers set 1 torch thread), else ``spawn``.
    :param channel: the channel read from multi-channel audio (WeNet's
        ``singal_channel_conf.channel``; mono audio needs 0).
    :param eval_dither: keep the extractor's dither with ``augment=False`` (WeNet's cv).
    :param features_on: ``"worker"`` (default: features computed here) or ``"device"``
        (decode and random draws only; :class:`~.device.DeviceFeatures` computes the
        features batched in the training process). ``device`` needs a Kaldi-style
        extractor (fbank, mfcc).
    :param augmentations: one keyword per feature augmentation of the registry
        (:data:`~wenet_lhotse.features.augmentations.AUGMENTATIONS`), by its ``name``
        (e.g. ``spec_aug=``); each ``None``/``False``, ``True`` (WeNet's defaults), a dict
        or its config (:class:`SpecAugConfig` & co.).

    ``augment=False`` (cv/test) turns off speed perturbation, ``spec_*`` and (unless
    ``eval_dither``) dither.
    Each process that calls the object (main, or each DataLoader worker) lazily starts
    its own pool; :meth:`close` stops it (garbage collection and exit do too). One call
    at a time per object: calls from several threads at once are not supported.
    """

    def __init__(
        self,
        extractor: Optional[FeatureExtractor] = None,
        num_workers: int = 0,
        speed_perturb: Union[None, bool, Sequence[float]] = None,
        resample_to: Optional[int] = 16000,
        *,
        seed: int = 0,
        fault_tolerant: bool = False,
        return_audio: bool = False,
        start_method: Optional[str] = None,
        channel: int = 0,
        eval_dither: bool = False,
        features_on: str = "worker",
        **augmentations: Any,
    ) -> None:
        if num_workers < 0:
            raise ValueError(f"num_workers must be >= 0, got {num_workers}")
        if features_on not in FEATURES_ON:
            raise ValueError(f"features_on must be one of {FEATURES_ON}, got {features_on!r}")
        recipe = FeatureRecipe.build(extractor, speed_perturb, resample_to, channel=channel,
                                     eval_dither=eval_dither, **augmentations)
        if features_on == "device":
            check_extractor(recipe.extractor)
        self.pipeline = CutPipeline(**vars(recipe), return_audio=return_audio,
                                    features_on=features_on)
        self.num_workers = int(num_workers)
        self.seed = int(seed)
        self.epoch = 0
        self.fault_tolerant = fault_tolerant
        self.start_method = start_method
        self.skip_report = SkipReport()
        self._pool: Optional[WorkerPool] = None

    @classmethod
    def from_recipe(cls, recipe: FeatureRecipe, **kwargs: Any) -> PooledFeatures:
        """Features computed by ``recipe``; ``kwargs``: how (``num_workers``, ``seed``,
        ``fault_tolerant``, ``return_audio``, ``features_on``, ...).

        >>> from wenet_lhotse.features.fbank import WenetFbank
        >>> f = PooledFeatures.from_recipe(FeatureRecipe.build(WenetFbank(), True), seed=3)
        >>> f.pipeline.speeds, f.seed
        ((0.9, 1.0, 1.1), 3)
        """
        return cls(recipe.extractor, speed_perturb=recipe.speeds, resample_to=recipe.resample_to,
                   channel=recipe.channel, eval_dither=recipe.eval_dither,
                   **recipe.augmentations, **kwargs)

    @property
    def extractor(self) -> FeatureExtractor:
        return self.pipeline.extractor

    @property
    def return_audio(self) -> bool:
        return self.pipeline.return_audio

    @property
    def num_failed(self) -> int:
        """Cuts dropped so far by this process (fault-tolerant mode)."""
        return len(self.skip_report)

    @property
    def worker_pids(self) -> List[int]:
        """Pids of this process's pool workers (empty before the first call)."""
        pool = self._pool
        return pool.pids if pool is not None and pool.owner_pid == os.getpid() else []

    def feature_dim(self) -> int:
        return self.extractor.feature_dim(self.pipeline.resample_to or 16000)

    def set_epoch(self, epoch: int) -> None:
        """Change the epoch that seeds per-cut randomness."""
        self.epoch = int(epoch)

    def _get_pool(self) -> WorkerPool:
        pool = self._pool
        if pool is not None and (pool.owner_pid != os.getpid() or not pool.alive):
            # Inherited through fork (the parent's workers), or broken: never reuse.
            pool = self._pool = None
        if pool is None:
            pool = self._pool = WorkerPool(self.pipeline, self.num_workers, self.start_method)
        return pool

    def __call__(self, cuts: CutSet, augment: bool = True,
                 epoch: Optional[int] = None) -> PooledBatch:
        """Features of ``cuts``: ``(feats, feats_lens, kept_cuts, audio)``.

        :param augment: speed perturbation, dither and spec_* on (train) or off (cv).
        :param epoch: overrides :attr:`epoch` for this call (e.g. from a sampler when the
            object lives in persistent DataLoader workers that never see ``set_epoch``).
        """
        out = self.unpadded(cuts, augment=augment, epoch=epoch)
        if not isinstance(out.feats, list):  # device mode: a WaveBatch
            return out
        return PooledBatch(*_collate(out.feats, self.feature_dim()), out.cuts,
                           _collate_audio(out.audio) if out.audio is not None else None)

    def unpadded(self, cuts: CutSet, augment: bool = True,
                 epoch: Optional[int] = None) -> PooledBatch:
        """As :meth:`__call__`, but ``feats`` (and ``audio``) are lists of per-cut
        arrays ``(frames, dim)`` float32 (``(samples,)`` float32), not yet padded: the
        dataset pads them in its batch order in one pass
        (:func:`~wenet_lhotse.dataset.padding.pad_rows`). Device mode: as ``__call__``."""
        cut_list = list(cuts)
        ep = self.epoch if epoch is None else int(epoch)
        seeds = [cut_seed(self.seed, ep, c.id) for c in cut_list]
        if self.num_workers == 0:
            replies = []
            with one_torch_thread():
                for i, (cut, s) in enumerate(zip(cut_list, seeds)):
                    try:
                        replies.append(("ok", i, self.pipeline.process(cut, s, augment)))
                    except WenetDataError as err:
                        replies.append(("err", i, err))
        else:
            # Cuts travel pickled (a few hundred bytes; in-memory audio carries its bytes):
            # 7x cheaper than to_dict() + deserialize_item, which measured ~40 us per cut.
            tasks = [(i, c, s, augment) for i, (c, s) in enumerate(zip(cut_list, seeds))]
            replies = self._get_pool().run(tasks)
        kept, payloads = [], []
        for cut, (status, _, payload) in zip(cut_list, replies):
            if status == "err":
                if not self.fault_tolerant:
                    raise payload
                self.skip_report.add(payload)
                continue
            kept.append(cut)
            payloads.append(payload)
        if self.pipeline.features_on == "device":  # waveforms; features come later
            waves = WaveBatch.collate(payloads)
            return PooledBatch(waves, waves.frames(), CutSet.from_cuts(kept), None)
        feats = [p[0] for p in payloads]
        lens = torch.tensor([f.shape[0] for f in feats], dtype=torch.int32)
        pcms = [p[1] for p in payloads] if self.return_audio else None
        return PooledBatch(feats, lens, CutSet.from_cuts(kept), pcms)

    def close(self) -> None:
        """Stop this process's worker pool (a later call starts a new one)."""
        pool, self._pool = self._pool, None
        if pool is not None and pool.owner_pid == os.getpid():
            pool.close()

    def __enter__(self) -> PooledFeatures:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __getstate__(self) -> Dict[str, Any]:
        state = dict(self.__dict__)
        state["_pool"] = None  # a pool belongs to the process that started it
        return state

    def __repr__(self) -> str:
        p = self.pipeline
        augs = "".join(f"{a.name}={p.augmentations.get(a.name)}, " for a in AUGMENTATIONS)
        return (f"PooledFeatures({type(p.extractor).__name__}, num_workers={self.num_workers}, "
                f"speeds={p.speeds}, resample_to={p.resample_to}, {augs}seed={self.seed})")


def _collate(feats: List[np.ndarray], dim: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(B, T_max, F)`` zero-padded features and ``(B,)`` int32 frame counts."""
    lens = torch.tensor([f.shape[0] for f in feats], dtype=torch.int32)
    if not feats:
        return torch.zeros((0, 0, dim), dtype=torch.float32), lens
    return collate_matrices(feats, padding_value=0.0), lens


def _collate_audio(pcms: List[np.ndarray]) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(B, S_max)`` zero-padded waveforms and ``(B,)`` int32 sample counts."""
    lens = torch.tensor([p.shape[0] for p in pcms], dtype=torch.int32)
    if not pcms:
        return torch.zeros((0, 0), dtype=torch.float32), lens
    return collate_vectors(pcms, padding_value=0.0), lens
