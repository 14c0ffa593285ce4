"""WeNet's ``dataset_conf`` turned into what the loader builders take: the dataset
(:func:`make_wenet_dataset`: features, augmentation, targets) and the per-source
cut transform (:class:`CutTransform`: WeNet's ``filter_conf``, then the source's tags)."""

from __future__ import annotations

from typing import Any, Mapping, Optional

from lhotse import CutSet

from wenet_lhotse.sources import TagCuts


class CutTransform:
    """Picklable ``CutSet -> CutSet``: WeNet's ``filter_conf`` (when a tokenizer is
    given and the split is not ``infer``), then the source's tags. ``filtered`` counts
    the cuts the filters removed in this process (the epoch ledger reads it)."""

    def __init__(self, tokenizer: Any = None, filter_conf: Optional[Mapping] = None,
                 tags: Optional[Mapping[str, Any]] = None) -> None:
        self.tokenizer = tokenizer
        self.filter_conf = dict(filter_conf) if filter_conf is not None else None
        self.tags = dict(tags or {})
        self._filter: Any = None  # one WenetFilter for every pass (it caches token counts)
        self.filtered = 0  # cuts removed by filter_conf in this process, all passes

    def _keep(self, cut: Any) -> bool:
        keep = bool(self._filter(cut))
        if not keep:
            self.filtered += 1
        return keep

    def __call__(self, cuts: CutSet) -> CutSet:
        if self.filter_conf is not None:
            if self._filter is None:
                from wenet_lhotse.dataset.filters import WenetFilter

                self._filter = WenetFilter(self.tokenizer, self.filter_conf)
            cuts = cuts.filter(self._keep)
        if self.tags:
            cuts = cuts.map(TagCuts(self.tags), apply_fn=None)  # MetaCuts too
        return cuts


def make_wenet_dataset(tokenizer: Any, dataset_conf: Mapping[str, Any], split: str, *,
                       pool_workers: int = 0, seed: int = 0, fault_tolerant: bool = False,
                       return_pcm: bool = False, features_on: str = "worker") -> Any:
    """Our ``WenetAsrDataset`` with features configured from WeNet's ``dataset_conf``
    (fbank/mfcc/log-mel, speed perturb, resample, spec_aug/sub/trim). With
    ``features_on="device"`` its batches carry waveforms; ``DeviceFeatures.for_dataset``
    turns them into features in the training process."""
    from wenet_lhotse.dataset import WenetAsrDataset
    from wenet_lhotse.features.fbank import extractor_from_wenet_conf
    from wenet_lhotse.features.strategy import PooledFeatures

    conf = dict(dataset_conf)
    train = split == "train"

    def aug(name: str, default: bool = False) -> Any:
        # WeNet: a boolean switch plus an optional *_conf dict of the function's arguments.
        on = conf.get(name, default)
        return (conf.get(f"{name}_conf") or True) if train and on else None

    lconf = conf.get("lhotse_conf") or {}
    cv_dither = lconf.get("cv_dither", "wenet")
    features = PooledFeatures(
        extractor_from_wenet_conf(conf), num_workers=pool_workers,
        # WeNet's singal_channel_conf; WeNet's cv keeps the yaml's dither (cv_dither)
        channel=int((conf.get("singal_channel_conf") or {}).get("channel", 0)),
        eval_dither=split == "cv" and cv_dither != "off",
        speed_perturb=bool(conf.get("speed_perturb", False)) and train,
        # WeNet's defaults: resample to 16 kHz and spec_aug on unless the yaml says otherwise
        resample_to=(conf.get("resample_conf") or {}).get("resample_rate", 16000),
        spec_aug=aug("spec_aug", default=True), spec_sub=aug("spec_sub"),
        spec_trim=aug("spec_trim"),
        seed=seed, fault_tolerant=fault_tolerant, return_audio=return_pcm,
        features_on=features_on)
    speaker_conf = conf.get("speaker_conf") or {}
    dataset = WenetAsrDataset(tokenizer, features, split=split, return_pcm=return_pcm,
                              fault_tolerant=fault_tolerant,
                              speaker_table=speaker_conf.get("speaker_table_path"))
    dataset.freeze_epoch = split == "cv" and cv_dither == "fixed"
    return dataset
