"""WeNet's three feature types as Lhotse feature extractors.

=======================  ==============================  ====================================
WeNet ``feats_type``     WeNet function                   extractor (Lhotse ``name``)
=======================  ==============================  ====================================
``fbank``                ``compute_fbank``               :class:`WenetFbank` (``wenet-fbank``)
``mfcc``                 ``compute_mfcc``                :class:`WenetMfcc` (``wenet-mfcc``)
``log_mel_spectrogram``  ``compute_log_mel_spectrogram``  :class:`WhisperLogMel`
                                                          (``wenet-whisper-log-mel``)
=======================  ==============================  ====================================

Input samples are floats in [-1, 1] (Lhotse's convention). Like WeNet, the Kaldi-style
extractors scale them by 32768 before the Kaldi front end, so ``dither`` is in int16
units: WeNet's ``dither: 0.1`` is ``WenetFbankConfig(dither=0.1)`` (Lhotse's own
``Fbank(dither=0.1)`` would add 32768x more noise).

Without dither, :class:`WenetFbank` equals ``torchaudio.compliance.kaldi.fbank(wave * 32768,
num_mel_bins=N, frame_length=25, frame_shift=10, dither=0, energy_floor=0.0,
sample_frequency=sr)`` to float32 rounding (max abs difference ~1e-4), with the same frame
count ``1 + (num_samples - window) // shift`` (``snip_edges=True``).

All extractors are registered with Lhotse (``@register_extractor``), so
``FeatureExtractor.from_dict(extractor.to_dict())`` and ``from_yaml`` round-trip.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, fields
from typing import Any, Dict, List, Optional, Sequence, Union

import numpy as np
import torch
from lhotse.features.base import FeatureExtractor, register_extractor

from wenet_lhotse.features import kaldi
from wenet_lhotse.features.whisper import log_mel_spectrogram

logger = logging.getLogger(__name__)

#: WeNet multiplies the [-1, 1] waveform by this before calling Kaldi's fbank/mfcc.
INT16_SCALE = float(1 << 15)

Samples = Union[np.ndarray, torch.Tensor]


def _as_1d_tensor(samples: Samples) -> torch.Tensor:
    """First channel of ``samples`` (``(S,)`` or ``(C, S)``) as a float32 tensor.

    Kaldi's fbank with ``channel=-1`` reads channel 0, which is what WeNet gets.
    """
    x = torch.from_numpy(np.ascontiguousarray(samples)) if isinstance(samples, np.ndarray) \
        else samples
    if x.dim() == 2:
        x = x[0]
    elif x.dim() != 1:
        raise ValueError(f"expected samples of shape (S,) or (C, S), got {tuple(x.shape)}")
    return x.float()


class _ConfigMixin:
    """``to_dict``/``from_dict`` that Lhotse's ``FeatureExtractor`` serialisation calls."""

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Dict[str, Any]):
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown {cls.__name__} option(s): {', '.join(unknown)}")
        return cls(**data)


@dataclass
class WenetFbankConfig(_ConfigMixin):
    """WeNet's ``fbank_conf`` plus the Kaldi options WeNet leaves at torchaudio's defaults.

    :param num_mel_bins: number of mel filters (output dimension).
    :param frame_length: frame length in milliseconds.
    :param frame_shift: frame shift in milliseconds.
    :param dither: std of Gaussian noise added on the int16 scale (WeNet units; 0 = off).
    :param window_type: ``povey`` | ``hamming`` | ``hanning`` | ``rectangular`` | ``blackman``.
    :param energy_floor: floor on the log-energy column (WeNet passes 0.0: no floor).
    :param low_freq: lowest mel filter edge in Hz.
    :param high_freq: highest mel filter edge in Hz (<= 0: offset from Nyquist).
    """

    num_mel_bins: int = 80
    frame_length: float = 25.0
    frame_shift: float = 10.0
    dither: float = 0.0
    window_type: str = "povey"
    energy_floor: float = 0.0
    low_freq: float = 20.0
    high_freq: float = 0.0
    preemphasis_coefficient: float = 0.97
    remove_dc_offset: bool = True
    round_to_power_of_two: bool = True
    snip_edges: bool = True
    blackman_coeff: float = 0.42
    raw_energy: bool = True
    use_energy: bool = False
    use_log_fbank: bool = True
    use_power: bool = True

    def frame_options(self, sampling_rate: float) -> kaldi.FrameOptions:
        return kaldi.FrameOptions(
            sampling_rate=float(sampling_rate),
            frame_length=float(self.frame_length),
            frame_shift=float(self.frame_shift),
            window_type=self.window_type,
            blackman_coeff=float(self.blackman_coeff),
            round_to_power_of_two=bool(self.round_to_power_of_two),
            snip_edges=bool(self.snip_edges),
            num_mel_bins=int(self.num_mel_bins),
            low_freq=float(self.low_freq),
            high_freq=float(self.high_freq),
        )

    def fbank_options(self, dither: Optional[float] = None) -> kaldi.FbankOptions:
        return kaldi.FbankOptions(
            dither=float(self.dither if dither is None else dither),
            energy_floor=float(self.energy_floor),
            preemphasis_coefficient=float(self.preemphasis_coefficient),
            remove_dc_offset=bool(self.remove_dc_offset),
            raw_energy=bool(self.raw_energy),
            use_energy=bool(self.use_energy),
            use_log_fbank=bool(self.use_log_fbank),
            use_power=bool(self.use_power),
        )


@dataclass
class WenetMfccConfig(WenetFbankConfig):
    """WeNet's ``mfcc_conf``: the fbank options plus ``num_ceps`` and ``cepstral_lifter``.

    Defaults are torchaudio's (23 mel bins, 13 cepstra); :func:`extractor_from_wenet_conf`
    applies WeNet's own defaults instead.
    """

    num_mel_bins: int = 23
    num_ceps: int = 13
    cepstral_lifter: float = 22.0


@dataclass
class WhisperLogMelConfig(_ConfigMixin):
    """WeNet's ``log_mel_spectrogram_conf``.

    :param n_fft: FFT size in samples.
    :param hop_length: frame shift in samples.
    :param num_mel_bins: 80 (Whisper v1/v2) or 128 (Whisper large-v3).
    :param padding: zeros appended to the waveform, in samples.
    :param pad_or_trim: Whisper's fixed input length: after ``padding``, cut or zero-pad
        the waveform to ``max_duration * sampling rate`` samples.
    :param max_duration: that length in seconds (used only with ``pad_or_trim``).
    :param sampling_rate: the rate the audio is expected at (Hz); only used to report
        ``frame_shift`` in seconds (the filters follow the actual rate).
    """

    n_fft: int = 400
    hop_length: int = 160
    num_mel_bins: int = 80
    padding: int = 0
    pad_or_trim: bool = False
    max_duration: int = 30
    sampling_rate: int = 16000


class _WenetExtractor(FeatureExtractor):
    """Shared plumbing: numpy/torch in, same type out; batched ``extract_batch``."""

    def compute(
        self,
        waves: Sequence[Samples],
        sampling_rate: int,
        dither: Optional[float] = None,
        generator: Optional[torch.Generator] = None,
    ) -> List[torch.Tensor]:
        """Features ``(frames, dim)`` float32 of each waveform (floats in [-1, 1]).

        :param dither: overrides the configured dither (int16 units); ``0.0`` disables it.
        :param generator: torch RNG for the dither noise (reproducible extraction).
        """
        raise NotImplementedError

    def extract(self, samples: Samples, sampling_rate: int) -> Samples:
        out = self.compute([samples], sampling_rate)[0]
        return out.numpy() if isinstance(samples, np.ndarray) else out

    def extract_batch(self, samples, sampling_rate: int, lengths=None):
        """Batched extraction; each output has exactly the frames of :meth:`extract`.

        ``samples``: a list of 1-D arrays/tensors, or a padded 2-D batch with ``lengths``
        (in samples). Returns a list (or a stacked array when all shapes agree, as
        Lhotse's base class does).
        """
        is_numpy = False
        if lengths is not None:
            waves = [samples[i, : int(n)] for i, n in enumerate(lengths)]
        elif isinstance(samples, (list, tuple)):
            waves = list(samples)
        elif samples.ndim > 1:
            waves = list(samples)
        else:
            waves = [samples]
        is_numpy = any(isinstance(w, np.ndarray) for w in waves)
        feats = self.compute(waves, sampling_rate)
        if is_numpy:
            feats = [f.numpy() for f in feats]
        if isinstance(samples, (list, tuple)) or lengths is not None:
            return feats
        if len(feats) == 1:
            return feats[0]
        if all(f.shape == feats[0].shape for f in feats):
            return np.stack(feats) if is_numpy else torch.stack(feats)
        return feats


@register_extractor
class WenetFbank(_WenetExtractor):
    """WeNet's ``compute_fbank`` (Kaldi fbank on ``waveform * 32768``), pure torch.

    >>> import numpy as np
    >>> fbank = WenetFbank(WenetFbankConfig(num_mel_bins=80))
    >>> fbank.extract(np.zeros(16000, dtype=np.float32), 16000).shape  # 1 s: 98 frames
    (98, 80)
    """

    name = "wenet-fbank"
    config_type = WenetFbankConfig

    def __init__(self, config: Optional[WenetFbankConfig] = None) -> None:
        super().__init__(config=config)
        if self.config.window_type not in kaldi.WINDOW_TYPES:
            raise ValueError(f"unknown window_type {self.config.window_type!r}; "
                             f"expected one of {kaldi.WINDOW_TYPES}")

    @property
    def frame_shift(self) -> float:
        """Seconds."""
        return self.config.frame_shift / 1000.0

    def feature_dim(self, sampling_rate: int) -> int:
        return self.config.num_mel_bins + int(self.config.use_energy)

    def compute(self, waves, sampling_rate, dither=None, generator=None):
        opts = self.config.frame_options(sampling_rate)
        fb = self.config.fbank_options(dither)
        return kaldi.fbank([_as_1d_tensor(w) for w in waves], opts, fb, generator=generator,
                           scale=INT16_SCALE)


@register_extractor
class WenetMfcc(_WenetExtractor):
    """WeNet's ``compute_mfcc`` (Kaldi MFCC on ``waveform * 32768``), pure torch."""

    name = "wenet-mfcc"
    config_type = WenetMfccConfig

    def __init__(self, config: Optional[WenetMfccConfig] = None) -> None:
        super().__init__(config=config)
        if self.config.num_ceps > self.config.num_mel_bins:
            raise ValueError(
                f"num_ceps cannot be larger than num_mel_bins: "
                f"{self.config.num_ceps} vs {self.config.num_mel_bins}"
            )

    @property
    def frame_shift(self) -> float:
        """Seconds."""
        return self.config.frame_shift / 1000.0

    def feature_dim(self, sampling_rate: int) -> int:
        return self.config.num_ceps

    def compute(self, waves, sampling_rate, dither=None, generator=None):
        cfg = self.config
        return kaldi.mfcc([_as_1d_tensor(w) for w in waves], cfg.frame_options(sampling_rate),
                          cfg.fbank_options(dither), num_ceps=cfg.num_ceps,
                          cepstral_lifter=cfg.cepstral_lifter, generator=generator,
                          scale=INT16_SCALE)


@register_extractor
class WhisperLogMel(_WenetExtractor):
    """WeNet's ``compute_log_mel_spectrogram`` (Whisper front end). Has no dither."""

    name = "wenet-whisper-log-mel"
    config_type = WhisperLogMelConfig

    @property
    def frame_shift(self) -> float:
        """Seconds, at ``config.sampling_rate``."""
        return self.config.hop_length / self.config.sampling_rate

    def feature_dim(self, sampling_rate: int) -> int:
        return self.config.num_mel_bins

    def compute(self, waves, sampling_rate, dither=None, generator=None):
        c = self.config
        return log_mel_spectrogram([_as_1d_tensor(w) for w in waves], sampling_rate,
                                   n_fft=c.n_fft, hop_length=c.hop_length,
                                   num_mel_bins=c.num_mel_bins, padding=c.padding,
                                   pad_or_trim=c.pad_or_trim, max_duration=c.max_duration)


# Defaults of WeNet's processor functions, used for keys a yaml leaves out.
_WENET_FBANK_DEFAULTS = dict(num_mel_bins=23, frame_length=25, frame_shift=10, dither=0.0)
_WENET_MFCC_DEFAULTS = dict(num_mel_bins=23, frame_length=25, frame_shift=10, dither=0.0,
                            num_ceps=40, high_freq=0.0, low_freq=20.0)
_WENET_LOGMEL_DEFAULTS = dict(n_fft=400, hop_length=160, num_mel_bins=80, padding=0,
                              pad_or_trim=False, max_duration=30)


def extractor_from_wenet_conf(dataset_conf: Optional[Dict[str, Any]]) -> FeatureExtractor:
    """The extractor WeNet's ``dataset_conf`` selects with ``feats_type``.

    Reads ``feats_type`` (default ``"fbank"``) and ``fbank_conf`` / ``mfcc_conf`` /
    ``log_mel_spectrogram_conf``. Keys missing from the yaml take the defaults of WeNet's
    ``compute_*`` functions (e.g. 23 mel bins for fbank), so the features equal WeNet's.
    An unknown key raises ``ValueError`` naming it.
    """
    conf = dict(dataset_conf or {})
    feats_type = conf.get("feats_type", "fbank")
    if feats_type == "fbank":
        params = {**_WENET_FBANK_DEFAULTS, **(conf.get("fbank_conf") or {})}
        return WenetFbank(WenetFbankConfig.from_dict(params))
    if feats_type == "mfcc":
        params = {**_WENET_MFCC_DEFAULTS, **(conf.get("mfcc_conf") or {})}
        return WenetMfcc(WenetMfccConfig.from_dict(params))
    if feats_type == "log_mel_spectrogram":
        params = {**_WENET_LOGMEL_DEFAULTS, **(conf.get("log_mel_spectrogram_conf") or {})}
        return WhisperLogMel(WhisperLogMelConfig.from_dict(params))
    raise ValueError(
        f"unknown feats_type {feats_type!r}; expected 'fbank', 'mfcc' or 'log_mel_spectrogram'"
    )
