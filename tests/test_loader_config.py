"""loader.config: WeNet's dataset_conf translated."""

from __future__ import annotations

import pytest

from wenet_lhotse.loader.config import LoaderConfig


def test_batch_conf_translation():
    assert LoaderConfig.from_wenet({"batch_conf": {"batch_type": "dynamic",
                                                   "max_frames_in_batch": 12000}}
                                   ).batching.max_duration == pytest.approx(120.0)
    static = LoaderConfig.from_wenet({"batch_conf": {"batch_type": "static", "batch_size": 16}})
    assert static.batching.resolve(4.5) == pytest.approx(72.0)
    cfg = LoaderConfig.from_wenet({"shuffle_conf": {"shuffle_size": 50000}}, "cv")
    assert cfg.buffer_size == 50000 and cfg.shuffle is False
    with pytest.raises(ValueError, match="unknown lhotse_conf keys"):
        LoaderConfig.from_wenet({"lhotse_conf": {"max_duraton": 3}})


def test_resolve_leaves_the_config_unchanged():
    static = LoaderConfig.from_wenet({"batch_conf": {"batch_type": "static", "batch_size": 16}})
    assert static.batching.resolve(4.5) == pytest.approx(72.0)
    assert static.batching.max_duration is None  # a second data set resolves afresh
    assert static.batching.resolve(2.0) == pytest.approx(32.0)
    assert static.batching.explain(2.0) == "batch_size 16 x mean duration 2.00 s = 32.0 s"
