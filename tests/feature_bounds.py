"""The device path's tolerance derived from a float64 reference on the same device (issue
30: ``CUDA_TOL = 5e-3`` was tuned on one H200; an H100 gave 9.67e-3).

For each cut, both paths' own waveforms (``pcm``: after speed perturbation, before
dither) are run through the same fbank in float64 on ``device`` -- the same dither
noise (the cut's seed), frames, window, FFT and mel weights, without float32 rounding:

* ``e_worker``: max |worker path (float32, CPU) - its float64 reference|;
* ``e_device``: max |device path (float32, ``device``) - its float64 reference|;
* ``e_wave``: max |reference of the worker's pcm - reference of the device's pcm|: how
  far the two waveforms' float32 rounding (resampler, speed perturbation) moves the
  exact log-mel (computed in float64, so not a float32 effect of the fbank).

The device's float32 fbank must be no worse than :data:`FACTOR` times the CPU's on the
same input (``e_device <= FACTOR * e_worker``, a statement about the device's FFT and
matrix products, which fails on e.g. TF32 products), and the two paths then differ by at
most ``tolerance = e_worker + FACTOR * e_worker + e_wave`` (triangle inequality). The
augmentations (masks, frame substitution, trimming) move and zero values without
arithmetic, so the same bound holds for the augmented features of the same draws.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List

import torch

from wenet_lhotse.features import PooledFeatures, cut_seed, kaldi
from wenet_lhotse.features.device import plan_cut
from wenet_lhotse.features.dither import dithered
from wenet_lhotse.features.fbank import INT16_SCALE

#: How much larger the device's float32 fbank error may be than the CPU's on the same
#: input (FFT libraries sum in other orders: a small factor; TF32 would be ~1000x).
FACTOR = 4.0
#: The error floor below which ratios mean nothing (float32 resolution of log-mels ~ 10).
FLOOR = 1e-5


@dataclass
class Bound:
    e_worker: float
    e_device: float
    e_wave: float

    @property
    def tolerance(self) -> float:
        return self.e_worker + FACTOR * max(self.e_worker, FLOOR) + self.e_wave

    def check(self) -> None:
        assert self.e_device <= FACTOR * max(self.e_worker, FLOOR), (
            f"the device's float32 fbank error {self.e_device:.3g} exceeds {FACTOR} x the "
            f"CPU's {self.e_worker:.3g} (float64 references on the same device)")


def reference(features: PooledFeatures, cut, pcm: torch.Tensor, seed: int,
              dither: bool, device: str) -> torch.Tensor:
    """The fbank of waveform ``pcm`` (in [-1, 1]) in float64 on ``device``, with the
    cut's dither noise (seed ``seed``), as the paths compute it in float32."""
    cfg = features.pipeline.extractor.config
    sr = features.pipeline.resample_to or cut.sampling_rate
    opts, fb = cfg.frame_options(sr), cfg.fbank_options(0.0)
    x = pcm.to(device=device, dtype=torch.float64)
    w = dithered(x, float(cfg.dither) if dither else 0.0,
                 torch.Generator().manual_seed(seed), INT16_SCALE)
    return kaldi.frames_to_fbank(kaldi.frame_waveform(w, opts), opts, fb).float()


def derive(features: PooledFeatures, cuts: List, device: str, epoch: int = 0,
           augment: bool = True) -> Bound:
    """The three measured errors for ``cuts`` (a pipeline without spec augmentations,
    with ``return_audio``); ``augment``: speed perturbation and dither drawn."""
    from lhotse import CutSet
    from test_features_device import device_path

    worker = features(CutSet.from_cuts(cuts), augment=augment, epoch=epoch)
    batch = device_path(features, cuts, augment, epoch, device=device)[0]
    wpcm, wlens = worker.audio
    e_w = e_d = e_x = 0.0
    for i, cut in enumerate(cuts):
        _, draws = plan_cut(features.pipeline, cut, cut_seed(features.seed, epoch, cut.id),
                            augment)
        n = int(worker.feats_lens[i])
        ref_w = reference(features, cut, wpcm[i, : int(wlens[i])], draws.seed, draws.dither,
                          device).cpu()
        dpcm = batch["pcm"][i, : int(batch["pcm_length"][i])]
        ref_d = reference(features, cut, dpcm, draws.seed, draws.dither, device).cpu()
        e_w = max(e_w, (worker.feats[i, :n].float() - ref_w[:n]).abs().max().item())
        e_d = max(e_d, (batch["feats"][i, :n].float().cpu() - ref_d[:n]).abs().max().item())
        e_x = max(e_x, (ref_w[:n] - ref_d[:n]).abs().max().item())
    return Bound(e_w, e_d, e_x)


def plain(dither: float, seed: int = 7) -> PooledFeatures:
    """Speed perturbation and dither, no spec augmentation: the float arithmetic."""
    from wenet_lhotse.features import WenetFbank, WenetFbankConfig

    return PooledFeatures(WenetFbank(WenetFbankConfig(num_mel_bins=80, dither=dither)),
                          speed_perturb=True, seed=seed, return_audio=True)


def derived_tolerance(cuts: List, device: str, dithers=(0.0, 0.1), epochs=(0, 1)) -> float:
    """The largest :attr:`Bound.tolerance` over ``dithers`` x ``epochs`` (other speed
    draws) and cv (no draws), each bound checked."""
    bounds = [derive(plain(d), cuts, device, e) for d in dithers for e in epochs]
    bounds.append(derive(plain(0.0), cuts, device, augment=False))
    for b in bounds:
        b.check()
    return max(b.tolerance for b in bounds)
