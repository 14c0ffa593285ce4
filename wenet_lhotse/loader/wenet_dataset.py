"""WeNet's ``dataset_conf`` turned into what the loader builders take: the dataset
(:func:`make_wenet_dataset`: features, augmentation, targets) and the per-source
cut transform (:class:`CutTransform`: WeNet's ``filter_conf``, then the source's tags)."""

from __future__ import annotations

from typing import Any, Mapping, Optional, Union

from lhotse import CutSet

from wenet_lhotse.dataset.filters import FilterConf
from wenet_lhotse.features.recipe import FeatureRecipe
from wenet_lhotse.sources import TagCuts


class CutTransform:
    """Picklable ``CutSet -> CutSet``: WeNet's ``filter_conf`` (when a tokenizer is
    given and the split is not ``infer``), then the source's tags. ``filtered`` counts
    the cuts the filters removed in this process (the epoch ledger reads it)."""

    def __init__(self, tokenizer: Any = None,
                 filter_conf: Union[None, Mapping[str, Any], FilterConf] = None,
                 tags: Optional[Mapping[str, Any]] = None) -> None:
        self.tokenizer = tokenizer
        self.filter_conf = (FilterConf.from_dict(filter_conf) if isinstance(filter_conf, Mapping)
                            else filter_conf)
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
                       pool_workers: Optional[int] = None, seed: int = 0,
                       fault_tolerant: Optional[bool] = None, return_pcm: Optional[bool] = None,
                       features_on: Optional[str] = None, lang_id: Any = None) -> Any:
    """Our ``WenetAsrDataset`` with features configured from WeNet's ``dataset_conf``
    (the split's :class:`~wenet_lhotse.features.recipe.FeatureRecipe`: fbank/mfcc/log-mel,
    speed perturb, resample, spec_aug/sub/trim). ``pool_workers``, ``fault_tolerant``,
    ``return_pcm``, ``features_on`` default to ``dataset_conf.lhotse_conf``'s; its
    ``lang_from_data`` and ``cv_dither`` apply too. ``lang_id``: ``text -> language`` (WeNet's
    langid). With ``features_on="device"`` its batches carry waveforms;
    ``DeviceFeatures.for_dataset`` turns them into features in the training process."""
    from wenet_lhotse.dataset import WenetAsrDataset
    from wenet_lhotse.features.strategy import PooledFeatures
    from wenet_lhotse.loader.config import split_rules
    from wenet_lhotse.loader.lhotse_conf import LhotseConf

    rules = split_rules(split)
    lconf = LhotseConf.from_dict(dataset_conf.get("lhotse_conf"))
    # WeNet's cv keeps the yaml's dither (lhotse_conf.cv_dither: off drops it, fixed freezes it)
    eval_dither = rules.eval_dither and lconf.cv_dither != "off"
    recipe = FeatureRecipe.from_wenet_conf(dataset_conf, rules.augment, eval_dither)
    return_pcm = lconf.return_pcm if return_pcm is None else return_pcm
    fault_tolerant = lconf.fault_tolerant if fault_tolerant is None else fault_tolerant
    features = PooledFeatures.from_recipe(
        recipe, seed=seed, return_audio=return_pcm, fault_tolerant=fault_tolerant,
        num_workers=lconf.pool_workers if pool_workers is None else pool_workers,
        features_on=lconf.features_on if features_on is None else features_on)
    speaker_conf = dataset_conf.get("speaker_conf") or {}
    return WenetAsrDataset(tokenizer, features, split=split, return_pcm=return_pcm,
                           fault_tolerant=fault_tolerant,
                           speaker_table=speaker_conf.get("speaker_table_path"),
                           lang_id=lang_id, lang_from_data=lconf.lang_from_data,
                           freeze_epoch=eval_dither and lconf.cv_dither == "fixed")
