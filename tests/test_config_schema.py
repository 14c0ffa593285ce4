"""One typed config: each key declared once (loader.schema, LhotseConf), the splits'
differences in one table (dataset.splits), read the same way by every reader."""

from __future__ import annotations

import dataclasses

import pytest

from wenet_lhotse.dataset.splits import SPLITS, split_rules
from wenet_lhotse.errors import WenetConfigError
from wenet_lhotse.features.recipe import CutLengths
from wenet_lhotse.loader.config import LoaderConfig, wenet_batch_conf
from wenet_lhotse.loader.config_check import check_dataset_conf, lhotse_conf_rules
from wenet_lhotse.loader.constraints import MaxFramesConstraint, wenet_constraint
from wenet_lhotse.loader.lhotse_conf import LhotseConf


def test_lhotse_conf_and_config_check_share_each_keys_rule():
    """A bad value is refused with the same words by the yaml check and the typed config."""
    bad = {"num_buckets": 0, "mode": "mapp", "pool_workers": -1, "max_duration": -3,
           "features_on": "gpu", "device": "nonsense", "probe_cache": "yes",
           "fault_tolerant": "false"}
    for name, value in bad.items():
        with pytest.raises(WenetConfigError) as typed:
            LhotseConf.from_dict({name: value})
        with pytest.raises(WenetConfigError) as checked:
            check_dataset_conf({"lhotse_conf": {name: value}})
        assert str(typed.value) == f"lhotse_conf.{name}: " + \
            str(checked.value).split(f"lhotse_conf.{name}: ", 1)[1], name
    assert set(lhotse_conf_rules()) == {f.name for f in dataclasses.fields(LhotseConf)}


def test_batch_conf_defaults_and_errors_come_from_one_place():
    assert wenet_batch_conf(None) == {"batch_type": "static", "batch_size": 16}
    assert wenet_batch_conf({"batch_type": "dynamic"})["max_frames_in_batch"] == 12000
    assert MaxFramesConstraint(CutLengths()).max_frames == 12000
    assert wenet_constraint({"batch_type": "dynamic"}, CutLengths()).max_frames == 12000
    for call in (lambda: wenet_batch_conf({"batch_type": "dynamc"}),
                 lambda: wenet_constraint({"batch_type": "dynamc"}, CutLengths()),
                 lambda: LoaderConfig.from_wenet({"batch_conf": {"batch_type": "dynamc"}})):
        with pytest.raises(ValueError, match=r"^dataset_conf.batch_conf.batch_type: unknown "
                                             r"value 'dynamc'; use static, bucket, dynamic$"):
            call()
    for call in (lambda: MaxFramesConstraint(CutLengths(), max_frames=0),
                 lambda: wenet_constraint({"batch_type": "dynamic", "max_frames_in_batch": 0},
                                          CutLengths())):
        with pytest.raises(ValueError, match=r"^dataset_conf.batch_conf.max_frames_in_batch: "
                                             r"must be a positive integer, got 0$"):
            call()


def test_for_split_is_where_splits_differ():
    conf = {"cycle": 3, "shuffle": True, "list_shuffle": True, "speed_perturb": True}
    train = LoaderConfig.from_wenet(conf)
    assert (train.split, train.shuffle, train.cycle, train.list_shuffle) == \
        ("train", True, 3, True)
    for split in ("cv", "infer"):
        other = train.for_split(split)
        assert (other.split, other.shuffle, other.cycle, other.list_shuffle) == \
            (split, False, 1, False)
        assert other.for_split("train") == train
    assert [split_rules(s).augment for s in SPLITS] == [True, False, False]
    assert [split_rules(s).filter for s in SPLITS] == [True, True, False]
    assert [split_rules(s).eval_dither for s in SPLITS] == [False, True, False]
    with pytest.raises(ValueError, match="split must be one of"):
        split_rules("test")
    # WeNet's filter_conf, its defaults filled in, where the split filters
    filtered = LoaderConfig.from_wenet({"filter_conf": {"max_length": 40960}})
    assert filtered.filter_conf.max_length == 40960 and filtered.filter_conf.min_length == 10
    assert filtered.for_split("cv").filter_conf == filtered.filter_conf
    assert filtered.for_split("infer").filter_conf is None
