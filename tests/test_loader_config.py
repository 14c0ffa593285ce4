"""loader.config: WeNet's dataset_conf translated."""

from __future__ import annotations

import pytest

from wenet_lhotse.loader.config import LoaderConfig


def test_batch_conf_translation():
    # default: WeNet's numbers, batch_conf checked with WeNet's defaults filled in
    wenet = LoaderConfig.from_wenet({"batch_conf": {"batch_type": "dynamic",
                                                    "max_frames_in_batch": 12000}}).batching
    assert wenet.by == "wenet" and wenet.batch_conf["max_frames_in_batch"] == 12000
    assert LoaderConfig.from_wenet({}).batching.batch_conf == {"batch_type": "static",
                                                               "batch_size": 16}
    with pytest.raises(ValueError, match=r"dataset_conf.batch_conf.batch_size: must be a "
                                         r"positive integer, got 0"):
        LoaderConfig.from_wenet({"batch_conf": {"batch_type": "static", "batch_size": 0}})
    with pytest.raises(ValueError, match="bucket_batch_sizes: one more entry"):
        LoaderConfig.from_wenet({"batch_conf": {"batch_type": "bucket",
                                                "bucket_boundaries": [100, 200],
                                                "bucket_batch_sizes": [8, 4]}})
    # opt-in: a duration budget
    by_duration = {"batch_by": "duration"}
    assert LoaderConfig.from_wenet({"batch_conf": {"batch_type": "dynamic",
                                                   "max_frames_in_batch": 12000},
                                    "lhotse_conf": by_duration}
                                   ).batching.max_duration == pytest.approx(120.0)
    static = LoaderConfig.from_wenet({"batch_conf": {"batch_type": "static", "batch_size": 16},
                                      "lhotse_conf": by_duration})
    assert static.batching.resolve(4.5) == pytest.approx(72.0)
    given = LoaderConfig.from_wenet({"lhotse_conf": {"max_duration": 30}}).batching
    assert given.by == "duration" and given.max_duration == 30
    cfg = LoaderConfig.from_wenet({"shuffle_conf": {"shuffle_size": 50000}}, "cv")
    assert cfg.buffer_size == 50000 and cfg.shuffle is False
    with pytest.raises(ValueError, match="unknown lhotse_conf keys"):
        LoaderConfig.from_wenet({"lhotse_conf": {"max_duraton": 3}})
    with pytest.raises(ValueError, match="batch_by"):
        LoaderConfig.from_wenet({"lhotse_conf": {"batch_by": "frames"}})


def test_resolve_leaves_the_config_unchanged():
    static = LoaderConfig.from_wenet({"batch_conf": {"batch_type": "static", "batch_size": 16},
                                      "lhotse_conf": {"batch_by": "duration"}})
    assert static.batching.resolve(4.5) == pytest.approx(72.0)
    assert static.batching.max_duration is None  # a second data set resolves afresh
    assert static.batching.resolve(2.0) == pytest.approx(32.0)
    assert static.batching.explain(2.0) == "batch_size 16 x mean duration 2.00 s = 32.0 s"
