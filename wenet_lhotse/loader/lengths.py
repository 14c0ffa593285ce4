"""How long a cut is after the feature pipeline, in frames and seconds, for batching.

The speed factor of a cut is decided *before* batching from ``(seed, epoch, cut id)``
-- the very draw :class:`~wenet_lhotse.features.pipeline.CutPipeline` makes for that
cut (:func:`~wenet_lhotse.features.pipeline.planned_speed`) -- and the frame count
follows the extractor's own framing (Kaldi ``snip_edges``, Whisper hop), so the batch
caps of :mod:`wenet_lhotse.loader.constraints` hold exactly on the features of every
batch and the bucket edges (:mod:`wenet_lhotse.loader.bins`) are estimated from the
same lengths the sampler compares them with.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Optional, Tuple

from lhotse.cut import Cut

# Entries kept in the per-cut caches before they are cleared (recomputing is cheap).
_CACHE_LIMIT = 200_000



@dataclass(frozen=True)
class FrameCounter:
    """Number of feature frames for a waveform, as the configured extractor frames it.

    :param kind: ``kaldi`` (fbank/mfcc: Kaldi framing), ``whisper`` (log-mel: hop) or
        ``shift`` (any other extractor: ``round(seconds / frame_shift)``).
    :param resample_to: rate (Hz) the pipeline resamples to first; ``None`` keeps it.
    """

    kind: str = "kaldi"
    resample_to: Optional[int] = 16000
    frame_length_ms: float = 25.0
    frame_shift_ms: float = 10.0
    snip_edges: bool = True
    hop_length: int = 160  # samples (whisper)
    padding: int = 0  # samples appended before the STFT (whisper)
    pad_or_trim_seconds: Optional[float] = None  # whisper's pad_or_trim to max_duration

    @classmethod
    def from_extractor(cls, extractor: Any, resample_to: Optional[int] = 16000
                       ) -> FrameCounter:
        from wenet_lhotse.features.fbank import WenetFbank, WenetMfcc, WhisperLogMel

        cfg = getattr(extractor, "config", None)
        if isinstance(extractor, (WenetFbank, WenetMfcc)):
            return cls("kaldi", resample_to, float(cfg.frame_length), float(cfg.frame_shift),
                       bool(cfg.snip_edges))
        if isinstance(extractor, WhisperLogMel):
            trim = getattr(cfg, "max_duration", 30) if getattr(cfg, "pad_or_trim", False) \
                else None
            return cls("whisper", resample_to, hop_length=int(cfg.hop_length),
                       padding=int(cfg.padding),
                       pad_or_trim_seconds=None if trim is None else float(trim))
        return cls("shift", resample_to, frame_shift_ms=1000.0 * float(extractor.frame_shift))

    @classmethod
    def from_wenet_conf(cls, dataset_conf: Mapping[str, Any]) -> FrameCounter:
        """The counter for the extractor and resampling WeNet's ``dataset_conf`` selects."""
        from wenet_lhotse.features.fbank import extractor_from_wenet_conf

        rate = (dataset_conf.get("resample_conf") or {}).get("resample_rate", 16000)
        return cls.from_extractor(extractor_from_wenet_conf(dict(dataset_conf)), rate)

    def num_samples(self, num_samples: int, sampling_rate: int, speed: float = 1.0) -> int:
        """Samples after resampling and speed perturbation (the pipeline's order), from
        the lengths the pipeline's own functions give."""
        from wenet_lhotse.features.augment import speed_perturbed_length
        from wenet_lhotse.formats.audio import resampled_length

        if self.resample_to:
            num_samples = resampled_length(num_samples, sampling_rate, self.resample_to)
        return speed_perturbed_length(num_samples, speed)

    def rate(self, sampling_rate: int) -> int:
        return int(self.resample_to) if self.resample_to else int(sampling_rate)

    def frames(self, num_samples: int, sampling_rate: int) -> int:
        """Frames for ``num_samples`` samples at ``sampling_rate`` Hz (already resampled)."""
        if self.kind == "kaldi":
            size = int(sampling_rate * self.frame_length_ms * 0.001)
            shift = int(sampling_rate * self.frame_shift_ms * 0.001)
            if self.snip_edges:
                return 0 if num_samples < size else 1 + (num_samples - size) // shift
            return (num_samples + shift // 2) // shift
        if self.kind == "whisper":
            n = num_samples + self.padding
            if self.pad_or_trim_seconds is not None:
                n = int(self.pad_or_trim_seconds * sampling_rate)
            return n // self.hop_length
        return int(round(num_samples / sampling_rate * 1000.0 / self.frame_shift_ms))


@dataclass
class CutLengths:
    """A cut's length after the pipeline's resampling and speed perturbation.

    :param speeds: the speed factors (``None``: no perturbation, e.g. cv).
    :param seed: the feature pipeline's seed (the loader's ``seed``).
    """

    counter: FrameCounter = field(default_factory=FrameCounter)
    speeds: Optional[Tuple[float, ...]] = None
    seed: int = 0
    epoch: int = 0
    _cache: Dict[Tuple[str, float, int], Tuple[int, float]] = field(default_factory=dict,
                                                                      repr=False)

    def set_epoch(self, epoch: int) -> None:
        if int(epoch) != self.epoch:
            self.epoch = int(epoch)
            self._cache.clear()

    def speed(self, cut: Cut) -> float:
        if not self.speeds:
            return 1.0
        from wenet_lhotse.features.pipeline import planned_speed

        return planned_speed(self.seed, self.epoch, cut.id, self.speeds)

    def _lengths(self, cut: Cut) -> Tuple[int, float]:
        key = (cut.id, cut.duration, cut.sampling_rate)  # ids may repeat across sources
        hit = self._cache.get(key)
        if hit is None:
            sr = int(cut.sampling_rate)
            n = self.counter.num_samples(cut.num_samples, sr, self.speed(cut))
            rate = self.counter.rate(sr)
            hit = (self.counter.frames(n, rate), n / rate)
            if len(self._cache) >= _CACHE_LIMIT:
                self._cache.clear()
            self._cache[key] = hit
        return hit

    def frames(self, cut: Cut) -> int:
        """Feature frames of ``cut`` this epoch."""
        return self._lengths(cut)[0]

    def seconds(self, cut: Cut) -> float:
        """Duration of ``cut`` this epoch, after speed perturbation (seconds)."""
        return self._lengths(cut)[1]


def cut_lengths_from_wenet_conf(dataset_conf: Mapping[str, Any], *, train: bool, seed: int
                                ) -> CutLengths:
    """Lengths as :func:`~wenet_lhotse.loader.build.make_wenet_dataset`'s pipeline makes
    them: WeNet's speeds (0.9, 1.0, 1.1) when ``speed_perturb`` is on in training."""
    from wenet_lhotse.features.pipeline import WENET_SPEEDS

    speeds = WENET_SPEEDS if train and dataset_conf.get("speed_perturb", False) else None
    return CutLengths(FrameCounter.from_wenet_conf(dataset_conf), speeds, int(seed))
