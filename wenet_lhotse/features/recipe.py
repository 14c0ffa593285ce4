"""WeNet's per-cut feature recipe, read once from ``dataset_conf``, and the planned
length of a cut under it.

:class:`FeatureRecipe` holds what WeNet's ``dataset_conf`` says about one cut's features:
the extractor (``feats_type`` + ``*_conf``), resampling (``resample_conf``, WeNet's
default 16 kHz), the speed factors (``speed_perturb``: ``true`` -> WeNet's 0.9/1.0/1.1, a
list -> those factors), dither (the extractor's; kept in cv as WeNet does), the settings
of each feature augmentation of the registry
(:data:`~wenet_lhotse.features.augmentations.AUGMENTATIONS`) and the channel. Execution
(:class:`~wenet_lhotse.features.pipeline.CutPipeline`, a recipe plus how to run it),
planning (:class:`CutLengths`, the loader's batch constraints and bucket edges) and the
device path (:func:`~wenet_lhotse.features.device.plan_cut`) all read this one object.

Where it differs from WeNet: a ``speed_perturb`` list is honoured (WeNet's
``dataset.py`` only tests it for truth and always uses 0.9/1.0/1.1).

The planned length: the speed factor of a cut is the first draw of its
``random.Random(cut_seed(seed, epoch, cut id))`` (:func:`planned_speed`), the very draw
the pipeline and the device path make; sample counts are those
:func:`~wenet_lhotse.formats.audio.resample` and
:func:`~wenet_lhotse.features.augment.speed_perturb` return; frames follow the
extractor's framing (:func:`~wenet_lhotse.features.kaldi.num_frames` for fbank/mfcc, the
Whisper hop); an augmentation that changes the frame count (``spec_trim``) is planned
with its draws (:meth:`FeatureRecipe.draws`: WeNet batches after spec_trim). So batch
caps hold exactly on the features of every batch.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from lhotse.features.base import FeatureExtractor

from wenet_lhotse.features import kaldi
from wenet_lhotse.features.augment import choose_speed, speed_perturbed_length
from wenet_lhotse.features.augmentations import AUGMENTATIONS, BY_NAME, FeatureAugmentation
from wenet_lhotse.formats.audio import resampled_length

#: WeNet's default speed perturbation factors.
WENET_SPEEDS = (0.9, 1.0, 1.1)

SpeedPerturb = Union[None, bool, Sequence[float]]


def speed_factors(speed_perturb: SpeedPerturb) -> Optional[Tuple[float, ...]]:
    """The factors for a ``speed_perturb`` value: off (``None``/``False``/``[]``) ->
    ``None``, ``True`` -> WeNet's 0.9/1.0/1.1, a list -> its factors.

    >>> speed_factors(True), speed_factors([0.8, 1.2]), speed_factors(False)
    ((0.9, 1.0, 1.1), (0.8, 1.2), None)
    """
    if speed_perturb is True:
        return WENET_SPEEDS
    if not speed_perturb:
        return None
    return tuple(float(s) for s in speed_perturb)


# Entries kept in the per-cut caches before they are cleared (recomputing is cheap).
_CACHE_LIMIT = 200_000


def cut_seed(seed: int, epoch: int, cut_id: str) -> int:
    """A 64-bit seed from ``(seed, epoch, cut_id)``, stable across processes and runs
    (unlike ``hash()``, which is salted per process).

    >>> cut_seed(0, 0, "utt1") == cut_seed(0, 0, "utt1") != cut_seed(0, 1, "utt1")
    True
    """
    digest = hashlib.blake2b(f"{seed}|{epoch}|{cut_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def planned_speed(seed: int, epoch: int, cut_id: str, speeds: Sequence[float]) -> float:
    """The speed factor the recipe applies to ``cut_id`` in ``epoch`` (the first draw of
    the cut's ``random.Random(cut_seed(seed, epoch, cut_id))``), known before any audio
    is read: the loader's batching constraints count frames with it."""
    return choose_speed(random.Random(cut_seed(seed, epoch, cut_id)), speeds)


@dataclass(frozen=True)
class FrameCounter:
    """Number of feature frames for a waveform, as the configured extractor frames it.

    :param kind: ``kaldi`` (fbank/mfcc: Kaldi framing), ``whisper`` (log-mel: hop) or
        ``shift`` (any other extractor: ``round(seconds / frame_shift)``).
    :param resample_to: rate (Hz) the pipeline resamples to first; ``None`` keeps it.

    >>> FrameCounter().frames(16000, 16000)  # 1 s at 25/10 ms, snip_edges
    98
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
        return FeatureRecipe.from_wenet_conf(dataset_conf).frame_counter()

    def num_samples(self, num_samples: int, sampling_rate: int, speed: float = 1.0) -> int:
        """Samples after resampling and speed perturbation (the pipeline's order), from
        the lengths the pipeline's own functions give."""
        if self.resample_to:
            num_samples = resampled_length(num_samples, sampling_rate, self.resample_to)
        return speed_perturbed_length(num_samples, speed)

    def rate(self, sampling_rate: int) -> int:
        """The rate (Hz) features are computed at for audio at ``sampling_rate``."""
        return int(self.resample_to) if self.resample_to else int(sampling_rate)

    def frames(self, num_samples: int, sampling_rate: int) -> int:
        """Frames for ``num_samples`` samples at ``sampling_rate`` Hz (already resampled)."""
        if self.kind == "kaldi":
            return kaldi.num_frames(num_samples, kaldi.FrameOptions(
                float(sampling_rate), self.frame_length_ms, self.frame_shift_ms,
                snip_edges=self.snip_edges))
        if self.kind == "whisper":
            n = num_samples + self.padding
            if self.pad_or_trim_seconds is not None:
                n = int(self.pad_or_trim_seconds * sampling_rate)
            return n // self.hop_length
        return int(round(num_samples / sampling_rate * 1000.0 / self.frame_shift_ms))

    def planned(self, num_samples: int, sampling_rate: int, speed: float = 1.0
                ) -> Tuple[int, int, int]:
        """``(samples, rate in Hz, frames)`` after resampling and speed perturbation of
        ``num_samples`` samples at ``sampling_rate`` Hz."""
        n = self.num_samples(num_samples, sampling_rate, speed)
        rate = self.rate(sampling_rate)
        return n, rate, self.frames(n, rate)


@dataclass
class CutLengths:
    """A cut's length after the pipeline's resampling and speed perturbation.

    :param speeds: the speed factors (``None``: no perturbation, e.g. cv).
    :param seed: the feature pipeline's seed (the loader's ``seed``).
    :param recipe: the recipe these lengths plan; with an augmentation that changes the
        frame count (``spec_trim``) its draws give the frames kept (WeNet batches after
        spec_trim).
    """

    counter: FrameCounter = field(default_factory=FrameCounter)
    speeds: Optional[Tuple[float, ...]] = None
    seed: int = 0
    epoch: int = 0
    recipe: Optional[FeatureRecipe] = field(default=None, repr=False)
    _cache: Dict[Tuple[str, float, int], Tuple[int, float]] = field(default_factory=dict,
                                                                      repr=False)

    def set_epoch(self, epoch: int) -> None:
        if int(epoch) != self.epoch:
            self.epoch = int(epoch)
            self._cache.clear()

    def speed(self, cut: Any) -> float:
        """The speed factor of ``cut`` this epoch (1.0 without perturbation)."""
        if not self.speeds:
            return 1.0
        return planned_speed(self.seed, self.epoch, cut.id, self.speeds)

    def _lengths(self, cut: Any) -> Tuple[int, float]:
        key = (cut.id, cut.duration, cut.sampling_rate)  # ids may repeat across sources
        hit = self._cache.get(key)
        if hit is None:
            n, rate, frames = self.counter.planned(cut.num_samples, int(cut.sampling_rate),
                                                   self.speed(cut))
            if self.recipe is not None and self.recipe.changes_frames():
                frames = self.recipe.draws(cut.num_samples, int(cut.sampling_rate),
                                           cut_seed(self.seed, self.epoch, cut.id), True).keep
            hit = (frames, n / rate)
            if len(self._cache) >= _CACHE_LIMIT:
                self._cache.clear()
            self._cache[key] = hit
        return hit

    def frames(self, cut: Any) -> int:
        """Feature frames of ``cut`` this epoch."""
        return self._lengths(cut)[0]

    def seconds(self, cut: Any) -> float:
        """Duration of ``cut`` this epoch, after speed perturbation (seconds)."""
        return self._lengths(cut)[1]


@dataclass
class CutDraws:
    """Everything random about one cut's features, drawn before any signal processing
    (:meth:`FeatureRecipe.draws`).

    ``sampling_rate``: of the decoded waveform (Hz); ``frames``: feature frames
    extracted, ``keep`` after the augmentations that change the frame count;
    ``augments``: each enabled augmentation's draw by name, in the registry's order (what
    its :meth:`~wenet_lhotse.features.augmentations.base.FeatureAugmentation.draw`
    returns; each augmentation's module documents its draw).
    """

    seed: int
    sampling_rate: int
    augment: bool
    dither: bool = False  # add the extractor's dither (training; WeNet's cv too)
    speed: float = 1.0
    frames: int = 0
    keep: int = 0
    augments: Dict[str, Any] = field(default_factory=dict)


@dataclass
class FeatureRecipe:
    """What is done to one cut's audio (see the module docstring). Units:
    ``resample_to`` in Hz (``None``: keep the rate); ``speeds`` are tempo factors (``None``:
    no perturbation); dither is the extractor's (int16 units for the Kaldi-style ones);
    ``augmentations``: the settings of each enabled feature augmentation by its
    registry name, also read as attributes (``recipe.spec_aug``: ``None`` when off).

    >>> from wenet_lhotse.features.fbank import WenetFbank
    >>> r = FeatureRecipe.build(WenetFbank(), speed_perturb=[0.9, 1.1], spec_aug=True)
    >>> r.speeds, r.spec_aug.num_t_mask, r.spec_trim
    ((0.9, 1.1), 2, None)
    """

    extractor: FeatureExtractor
    resample_to: Optional[int] = 16000
    speeds: Optional[Tuple[float, ...]] = None
    #: augmentation name -> its settings (enabled ones only)
    augmentations: Dict[str, Any] = field(default_factory=dict)
    #: the channel read from multi-channel audio (WeNet's ``singal_channel_conf.channel``)
    channel: int = 0
    #: apply the extractor's dither also when not augmenting (WeNet's cv keeps it)
    eval_dither: bool = False

    def __getattr__(self, name: str) -> Any:
        # recipe.spec_aug & co.: a registered augmentation's settings (None: off)
        if name in BY_NAME and "augmentations" in self.__dict__:
            return self.__dict__["augmentations"].get(name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @classmethod
    def build(cls, extractor: Optional[FeatureExtractor] = None,
              speed_perturb: SpeedPerturb = None, resample_to: Optional[int] = 16000, *,
              channel: int = 0, eval_dither: bool = False, **augmentations: Any
              ) -> FeatureRecipe:
        """A recipe from loose settings: ``speed_perturb`` as :func:`speed_factors`
        takes it; one keyword per augmentation of the registry (its ``name``, e.g.
        ``spec_aug=``): ``None``/``False``, ``True`` (WeNet's defaults), a dict or its
        config; ``extractor`` default ``WenetFbank()`` (80 bins)."""
        unknown = sorted(set(augmentations) - set(BY_NAME))
        if unknown:
            raise TypeError(f"unknown augmentation {unknown[0]!r}; known: "
                            f"{', '.join(BY_NAME)}")
        if extractor is None:
            from wenet_lhotse.features.fbank import WenetFbank

            extractor = WenetFbank()
        settings = {a.name: a.settings(augmentations.get(a.name)) for a in AUGMENTATIONS}
        return cls(extractor, int(resample_to) if resample_to else None,
                   speed_factors(speed_perturb),
                   {k: v for k, v in settings.items() if v is not None},
                   channel=int(channel), eval_dither=bool(eval_dither))

    @classmethod
    def from_wenet_conf(cls, dataset_conf: Mapping[str, Any], augment: bool = True,
                        eval_dither: bool = False) -> FeatureRecipe:
        """The recipe WeNet's ``dataset_conf`` describes, with WeNet's defaults (resample
        to 16 kHz, ``spec_aug`` on unless ``spec_aug: false``, the rest off).

        :param augment: speed perturbation and ``spec_*`` as configured (training); off
            (cv, infer) they are ``None``.
        :param eval_dither: keep the extractor's dither without augmentation (WeNet's cv).
        """
        from wenet_lhotse.features.fbank import extractor_from_wenet_conf

        conf = dict(dataset_conf)

        def aug(a: FeatureAugmentation) -> Any:
            # WeNet: a switch plus an optional *_conf dict of the function's arguments
            return (conf.get(a.conf_key) or True) \
                if augment and conf.get(a.name, a.wenet_default) else None

        return cls.build(
            extractor_from_wenet_conf(conf),
            speed_perturb=conf.get("speed_perturb", False) if augment else None,
            resample_to=(conf.get("resample_conf") or {}).get("resample_rate", 16000),
            channel=int((conf.get("singal_channel_conf") or {}).get("channel", 0)),
            eval_dither=eval_dither, **{a.name: aug(a) for a in AUGMENTATIONS})

    def enabled(self) -> List[Tuple[FeatureAugmentation, Any]]:
        """``(augmentation, settings)`` of each enabled augmentation, in WeNet's order."""
        return [(a, self.augmentations[a.name]) for a in AUGMENTATIONS
                if self.augmentations.get(a.name) is not None]

    def changes_frames(self) -> bool:
        """Whether an enabled augmentation may change a cut's frame count."""
        return any(a.changes_frames for a, _ in self.enabled())

    def frame_counter(self) -> FrameCounter:
        """How this recipe's extractor frames a waveform, after its resampling."""
        return FrameCounter.from_extractor(self.extractor, self.resample_to)

    def lengths(self, seed: int) -> CutLengths:
        """Planned lengths of cuts under this recipe with the pipeline's ``seed``."""
        return CutLengths(self.frame_counter(), self.speeds, int(seed), recipe=self)

    def draws(self, num_samples: int, sampling_rate: int, seed: int, augment: bool
              ) -> CutDraws:
        """Every random draw the pipeline makes for a cut of ``num_samples`` samples at
        ``sampling_rate`` Hz with per-cut ``seed`` (:func:`cut_seed`), in the pipeline's
        order (speed factor, then each augmentation in the registry's order), and the
        frame counts that follow: known without the audio."""
        rng = random.Random(seed)
        speed = choose_speed(rng, self.speeds) if augment and self.speeds else 1.0
        _, rate, frames = self.frame_counter().planned(num_samples, sampling_rate, speed)
        draws = CutDraws(seed=int(seed), sampling_rate=int(sampling_rate), augment=augment,
                         dither=augment or self.eval_dither, speed=float(speed),
                         frames=frames, keep=frames)
        enabled = self.enabled() if augment else []
        if enabled:
            bins = self.extractor.feature_dim(rate)
            for aug, cfg in enabled:
                draw = draws.augments[aug.name] = aug.draw(draws.keep, bins, rng, cfg)
                draws.keep = aug.frames(draws.keep, draw)
        return draws


def cut_lengths_from_wenet_conf(dataset_conf: Mapping[str, Any], *, train: bool, seed: int
                                ) -> CutLengths:
    """Planned lengths as :func:`~wenet_lhotse.loader.wenet_dataset.make_wenet_dataset`'s
    pipeline makes them: the split's :class:`FeatureRecipe` (``train``: with augmentation
    and speed perturbation)."""
    return FeatureRecipe.from_wenet_conf(dataset_conf, augment=train).lengths(seed)
