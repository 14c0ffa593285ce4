"""Features on the training device (``lhotse_conf.features_on: device``).

The per-cut recipe of the worker path (decode -> resample -> speed perturbation ->
dither -> fbank/mfcc -> the feature augmentations, in the registry's order) is
split in two:

* **in the DataLoader worker** (:func:`plan_cut`): decode only -- 16-bit PCM sources stay
  ``int16`` (half the bytes of float32 through the worker -> main pipe) -- and make
  every random draw of the recipe with the same generator in the same order as the
  worker path (``random.Random(seed)``: speed factor, then each augmentation's draws,
  whose frame counts follow from the sample count). No signal
  processing happens there. The draws travel with the batch (:class:`CutDraws`).
* **in the training process** (:class:`DeviceFeatures`, applied by the loader's iterator
  to each batch): resample, speed perturbation, dither, fbank/mfcc and the masks,
  batched on ``device`` (the model's GPU, or the CPU); each augmentation's
  ``apply_batch`` (:mod:`~wenet_lhotse.features.augmentations`) on the padded batch, in
  the registry's order, then the rows are cut to the frames kept.

Same seeds -> same speed factors, masks and trims as the worker path, by construction
(the draws are the worker path's own: :meth:`~wenet_lhotse.features.recipe.
FeatureRecipe.draws`). On the CPU the features equal the worker
path's (tested at 1e-4; dither noise included: each cut's noise is the slice of
:func:`~wenet_lhotse.features.dither.dither_noise` that a CPU ``torch.Generator`` seeded
with the cut's seed picks, as in the worker path -- on any device, the same numbers).

Supported ``feats_type``: ``fbank`` and ``mfcc`` (the Kaldi front end); Whisper's
log-mel stays on the worker path.
"""

from __future__ import annotations

from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from wenet_lhotse.features import kaldi
from wenet_lhotse.features.augment import resample, speed_perturb
from wenet_lhotse.features.augmentations import AUGMENTATIONS
from wenet_lhotse.features.dither import dithered
from wenet_lhotse.features.fbank import INT16_SCALE, WenetFbank, WenetMfcc
from wenet_lhotse.features.recipe import CutDraws
from wenet_lhotse.formats.audio import load_samples

#: batch keys the worker fills in device mode (popped by :class:`DeviceFeatures`)
WAV_KEY = "wav"
WAV_LENGTHS_KEY = "wav_lengths"
DRAWS_KEY = "_feature_draws"

FEATURES_ON = ("worker", "device")


def check_extractor(extractor: Any) -> None:
    """Raise ``ValueError`` unless the device path can compute ``extractor``'s features."""
    if not isinstance(extractor, (WenetFbank, WenetMfcc)):
        raise ValueError(
            f"lhotse_conf.features_on: device supports feats_type fbank and mfcc, not "
            f"{type(extractor).__name__}; use features_on: worker")


def plan_cut(recipe: Any, cut: Any, seed: int, augment: bool
             ) -> Tuple[np.ndarray, CutDraws]:
    """Worker side: the decoded samples (int16 or float32) and the cut's draws.

    ``recipe``: the worker path's :class:`~wenet_lhotse.features.recipe.FeatureRecipe`
    (its pipeline), whose :meth:`~wenet_lhotse.features.recipe.FeatureRecipe.draws` are
    made in the worker path's order with ``random.Random(seed)``.
    """
    samples, sr = load_samples(cut, recipe.channel)
    return samples, recipe.draws(samples.shape[0], sr, seed, augment)


class WaveBatch(NamedTuple):
    """What a device-mode :class:`~wenet_lhotse.features.strategy.PooledFeatures` returns
    in place of padded features (rows in cut order)."""

    wav: torch.Tensor  # (B, S_max) int16, or float32 in [-1, 1]; zero-padded
    wav_lens: torch.Tensor  # (B,) int32, samples
    draws: List[CutDraws]

    @property
    def shape(self) -> Tuple[int, ...]:
        return tuple(self.wav.shape)

    def batch_entries(self, order: Sequence[int]) -> Dict[str, Any]:
        """The batch dict entries for rows ``order`` (what :class:`DeviceFeatures`
        consumes), the waveforms cut to the longest kept row."""
        idx = torch.as_tensor(list(order), dtype=torch.long)
        lens = self.wav_lens[idx]
        s_max = int(lens.max()) if len(idx) else 0
        return {WAV_KEY: self.wav[idx][:, :s_max], WAV_LENGTHS_KEY: lens,
                DRAWS_KEY: [self.draws[i] for i in idx.tolist()]}

    @classmethod
    def collate(cls, items: Sequence[Tuple[np.ndarray, CutDraws]]) -> WaveBatch:
        wav, lens = collate_waves([w for w, _ in items])
        return cls(wav, lens, [d for _, d in items])

    def frames(self) -> torch.Tensor:
        """(B,) int32: feature frames of each row after spec_trim."""
        return torch.tensor([d.keep for d in self.draws], dtype=torch.int32)


def collate_waves(waves: Sequence[np.ndarray]) -> Tuple[torch.Tensor, torch.Tensor]:
    """Pad waveforms into ``(B, S_max)``: int16 when all are int16, else float32 in
    [-1, 1]; and their lengths in samples (int32)."""
    lens = np.array([w.shape[0] for w in waves], dtype=np.int32)
    dtype = np.int16 if waves and all(w.dtype == np.int16 for w in waves) else np.float32
    out = np.zeros((len(waves), int(lens.max()) if len(lens) else 0), dtype=dtype)
    for i, w in enumerate(waves):
        if dtype == np.float32 and w.dtype == np.int16:
            w = w.astype(np.float32) * (1.0 / INT16_SCALE)
        out[i, : w.shape[0]] = w
    return torch.from_numpy(out), torch.from_numpy(lens)


class DeviceFeatures:
    """Training-process side: turns a device-mode batch into WeNet's batch.

    Pops ``wav``, ``wav_lengths`` and the draws, adds ``feats`` (float32 ``(B, T, F)`` on
    ``device``, zero-padded) and ``feats_lengths`` (int32, on the CPU like the worker
    path's), and ``pcm`` / ``pcm_length`` when ``return_pcm``. Rows keep the order the
    worker gave them (longest final feature length first).

    :param extractor: ``WenetFbank`` or ``WenetMfcc`` (its config; its ``dither`` is
        used for cuts drawn with ``augment``).
    :param resample_to: Hz, as the worker path's ``resample_to``.
    :param device: where to compute; ``None``: the current CUDA device when CUDA is
        available, else the CPU (resolved at the first batch, i.e. after WeNet's
        ``train.py`` has called ``torch.cuda.set_device(local_rank)``).
    """

    def __init__(self, extractor: Any, resample_to: Optional[int] = 16000,
                 device: Union[None, str, torch.device] = None,
                 return_pcm: bool = False) -> None:
        check_extractor(extractor)
        self.extractor = extractor
        self.resample_to = int(resample_to) if resample_to else None
        self._device = torch.device(device) if device is not None else None
        self.return_pcm = return_pcm

    @classmethod
    def for_dataset(cls, dataset: Any, features_on: str = "worker",
                    device: Union[None, str, torch.device] = None) -> Optional[DeviceFeatures]:
        """The training-process half for ``dataset`` (our ``WenetAsrDataset``) when its
        features are computed on the device, else None. ``features_on`` is
        ``lhotse_conf.features_on``: ``"device"`` with a dataset whose features are
        computed in the workers is a config error."""
        p = getattr(getattr(dataset, "features", None), "pipeline", None)
        if getattr(p, "features_on", "worker") != "device":
            if features_on == "device":
                raise ValueError("lhotse_conf.features_on: device, but the dataset given "
                                 "computes its features in the DataLoader workers")
            return None
        return cls(p.extractor, p.resample_to, device=device,
                   return_pcm=bool(getattr(dataset, "return_pcm", False)))

    @property
    def device(self) -> torch.device:
        if self._device is None:
            self._device = (torch.device("cuda", torch.cuda.current_device())
                            if torch.cuda.is_available() else torch.device("cpu"))
        return self._device

    def __call__(self, batch: Dict[str, Any]) -> Dict[str, Any]:
        if WAV_KEY not in batch:
            return batch  # an empty batch or one made by the worker path
        if self.device.type != "cpu":
            return self._transform(batch)
        # On the CPU, one intra-op thread as in the worker path: several threads change
        # the float rounding of the resampler's matmul, which near-silent low mel bins
        # turn into log differences of up to 5e-3.
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return self._transform(batch)
        finally:
            torch.set_num_threads(threads)

    def _transform(self, batch: Dict[str, Any]) -> Dict[str, Any]:
        dev = self.device
        wav = batch.pop(WAV_KEY)
        lens = batch.pop(WAV_LENGTHS_KEY).tolist()
        draws: List[CutDraws] = batch.pop(DRAWS_KEY)
        x = wav.to(dev, non_blocking=True)
        if x.dtype == torch.int16:
            x = x.float() * (1.0 / INT16_SCALE)  # exact: a power of two
        waves, rates = [], []
        for i, d in enumerate(draws):
            w, sr = x[i, : lens[i]], d.sampling_rate
            if self.resample_to and sr != self.resample_to:
                w, sr = resample(w, sr, self.resample_to), self.resample_to
            if d.speed != 1.0:
                w = speed_perturb(w, sr, d.speed)
            waves.append(w)
            rates.append(sr)
        if len(set(rates)) <= 1:
            feats = self._features(waves, draws, rates[0] if rates else 16000)
        else:  # mixed rates without resample_to: frame options differ per cut
            feats = [self._features([w], [d], sr)[0] for w, d, sr in zip(waves, draws, rates)]
        feats, flens = self._augment(feats, draws)
        planned = batch.pop("feats_lengths", None)
        if planned is not None and not torch.equal(torch.as_tensor(planned).to(torch.int32),
                                                   flens):
            raise RuntimeError("device features: frame counts differ from the worker's plan")
        extra: Dict[str, Any] = {}
        if self.return_pcm:
            extra["pcm"] = torch.nn.utils.rnn.pad_sequence(waves, batch_first=True) if waves \
                else torch.zeros(0, 0, device=dev)
            extra["pcm_length"] = torch.tensor([w.numel() for w in waves], dtype=torch.int32)
        # the worker path's key order: keys, feats, feats_lengths, ..., tasks, pcm, ...
        out: Dict[str, Any] = {}
        for key, value in batch.items():
            out[key] = value
            if key == "keys":
                out["feats"], out["feats_lengths"] = feats, flens
            elif key == "tasks":
                out.update(extra)
        out.setdefault("feats", feats)
        out.setdefault("feats_lengths", flens)
        for key, value in extra.items():
            out.setdefault(key, value)
        return out

    def _features(self, waves: List[torch.Tensor], draws: Sequence[CutDraws],
                  sr: int) -> List[torch.Tensor]:
        cfg = self.extractor.config
        opts, fb = cfg.frame_options(sr), cfg.fbank_options(0.0)
        dither = float(cfg.dither)
        scaled = []
        for w, d in zip(waves, draws):
            # the worker path's noise: its offset drawn from a CPU generator with the
            # cut's seed, the table copied to the device once
            scaled.append(dithered(w, dither if d.dither else 0.0,
                                   torch.Generator().manual_seed(d.seed), INT16_SCALE))
        if not scaled:
            return []
        if scaled[0].device.type == "cpu":  # cache-sized blocks, as the worker path
            if isinstance(self.extractor, WenetMfcc):
                return kaldi.mfcc(scaled, opts, fb, num_ceps=cfg.num_ceps,
                                  cepstral_lifter=cfg.cepstral_lifter)
            return kaldi.fbank(scaled, opts, fb)
        # an accelerator: all frames of the batch in one FFT and one matmul
        frames = [kaldi.frame_waveform(w, opts) for w in scaled]
        mel = kaldi.frames_to_fbank(torch.cat(frames), opts, fb)
        if isinstance(self.extractor, WenetMfcc):
            mel = mel @ kaldi.cached_dct(cfg.num_ceps, cfg.num_mel_bins, cfg.cepstral_lifter,
                                         mel.device)
        return list(torch.split(mel, [f.shape[0] for f in frames]))

    def _augment(self, feats: List[torch.Tensor], draws: Sequence[CutDraws]
                 ) -> Tuple[torch.Tensor, torch.Tensor]:
        """Pad the cuts' features into ``(B, T, F)``, apply each augmentation drawn (the
        registry's order) and cut each row to the frames it keeps (zeros after)."""
        dev = self.device
        for f, d in zip(feats, draws):
            if f.shape[0] != d.frames:
                raise RuntimeError(f"device features: {f.shape[0]} frames where the worker "
                                   f"planned {d.frames}")
        dim = self.extractor.feature_dim(self.resample_to or 16000)
        padded = torch.zeros((len(feats), max((d.frames for d in draws), default=0),
                              feats[0].shape[1] if feats else dim), device=dev)
        for i, f in enumerate(feats):
            padded[i, : f.shape[0]] = f
        for aug in AUGMENTATIONS:
            row_draws = [d.augments.get(aug.name) for d in draws]
            if any(r is not None for r in row_draws):
                padded = aug.apply_batch(padded, row_draws)
        keep = torch.tensor([d.keep for d in draws], dtype=torch.int32)
        t_max = int(keep.max()) if len(draws) else 0
        if any(d.keep != d.frames for d in draws):  # rows trimmed: cut them, zeros after
            beyond = torch.arange(t_max, device=dev)[None, :] >= keep.to(dev)[:, None]
            padded = padded[:, :t_max].masked_fill(beyond[:, :, None], 0.0).contiguous()
        return padded, keep
