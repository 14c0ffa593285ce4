"""WeNet's augmentations: shapes, bounds on what they change, determinism, no sox."""

from __future__ import annotations

import random

import numpy as np
import pytest

from wenet_lhotse.features.augment import resample, speed_perturb
from wenet_lhotse.features.augmentations import (
    SpecAugConfig,
    SpecSubConfig,
    SpecTrimConfig,
    as_config,
)
from wenet_lhotse.features.augmentations.spec_aug import spec_aug
from wenet_lhotse.features.augmentations.spec_sub import spec_sub
from wenet_lhotse.features.augmentations.spec_trim import spec_trim


def feats(frames: int = 300, bins: int = 80) -> np.ndarray:
    # Strictly positive and all rows distinct, so zeros and copied rows are detectable.
    return (np.arange(frames * bins, dtype=np.float32).reshape(frames, bins) + 1.0)


def peak_hz(x: np.ndarray, sr: int) -> float:
    spectrum = np.abs(np.fft.rfft(x * np.hanning(len(x))))
    return float(np.argmax(spectrum) * sr / len(x))


@pytest.mark.parametrize("seed", range(20))
def test_spec_aug_masks_within_bounds(seed):
    x = feats()
    cfg = SpecAugConfig()  # 2 time masks <= 50 frames, 2 freq masks <= 10 bins
    y = spec_aug(x, random.Random(seed), cfg)
    assert y.shape == x.shape and y.dtype == x.dtype
    assert np.array_equal(x, feats())  # input untouched
    zero_rows = int(np.all(y == 0, axis=1).sum())
    zero_cols = int(np.all(y == 0, axis=0).sum())
    assert 1 <= zero_rows <= cfg.num_t_mask * cfg.max_t
    assert 1 <= zero_cols <= cfg.num_f_mask * cfg.max_f
    # Everything not in a masked row or column is unchanged.
    keep = ~(np.all(y == 0, axis=1)[:, None] | np.all(y == 0, axis=0)[None, :])
    assert np.array_equal(y[keep], x[keep])
    assert np.array_equal(y, spec_aug(x, random.Random(seed), cfg))


@pytest.mark.parametrize("seed", range(20))
def test_spec_sub_copies_earlier_frames(seed):
    x = feats()
    cfg = SpecSubConfig()
    y = spec_sub(x, random.Random(seed), cfg)
    assert y.shape == x.shape
    changed = np.where(np.any(y != x, axis=1))[0]
    assert len(changed) <= cfg.num_t_sub * cfg.max_t
    for t in changed:  # each substituted frame is an earlier input frame
        sources = np.where(np.all(x[:t] == y[t], axis=1))[0]
        assert len(sources) == 1


def test_spec_trim_drops_tail_frames():
    x = feats(100)
    lengths = {spec_trim(x, random.Random(s), SpecTrimConfig(max_t=20)).shape[0]
               for s in range(50)}
    assert lengths <= set(range(80, 100)) and len(lengths) > 5
    y = spec_trim(x, random.Random(0), SpecTrimConfig())
    assert np.array_equal(y, x[: len(y)])
    # Never removes half the utterance or more: 2 frames with max_t 1 stay as they are.
    assert spec_trim(feats(2), random.Random(0), SpecTrimConfig(max_t=1)).shape[0] == 2


def test_empty_features_are_left_alone():
    empty = np.zeros((0, 80), dtype=np.float32)
    assert spec_aug(empty, random.Random(0), SpecAugConfig()).shape == (0, 80)
    assert spec_sub(empty, random.Random(0), SpecSubConfig()).shape == (0, 80)


@pytest.mark.parametrize("factor", [0.9, 1.1])
def test_speed_perturb_changes_length_and_pitch(factor):
    sr = 16000
    t = np.arange(sr) / sr
    x = np.sin(2 * np.pi * 440 * t).astype(np.float32)
    y = speed_perturb(x, sr, factor)
    assert y.dtype == np.float32
    assert len(y) == int(len(x) / factor + 0.5)  # sox's 'rate' output length
    assert peak_hz(y, sr) == pytest.approx(440 * factor, abs=3)
    assert speed_perturb(x, sr, 1.0) is x


@pytest.mark.parametrize("orig,new", [(8000, 16000), (44100, 16000), (16000, 8000)])
def test_resample_keeps_frequency(orig, new):
    t = np.arange(orig) / orig
    x = np.sin(2 * np.pi * 1000 * t).astype(np.float32)
    y = resample(x, orig, new)
    assert len(y) == int(np.ceil(len(x) * new / orig))
    assert peak_hz(y, new) == pytest.approx(1000, abs=2)


def test_as_config():
    assert as_config(None, SpecAugConfig) is None and as_config(False, SpecAugConfig) is None
    assert as_config(True, SpecAugConfig) == SpecAugConfig()
    assert as_config({"max_t": 30}, SpecSubConfig) == SpecSubConfig(max_t=30)
    with pytest.raises(TypeError):
        as_config(3, SpecTrimConfig)


@pytest.mark.parametrize("n", [1, 7, 16001, 80003])
@pytest.mark.parametrize("factor", [0.9, 0.95, 1.1])
def test_speed_perturb_is_lhotses_sinc_resampler_with_sox_length(n, factor):
    """Same samples as Lhotse's ``Speed`` (its kernel through conv1d), sox's length."""
    import torch
    from lhotse.augmentation.torchaudio import Speed

    x = (0.1 * np.random.default_rng(n).standard_normal(n)).astype(np.float32)
    y = speed_perturb(x, 16000, factor)
    ref = Speed(factor=factor)(x.reshape(1, -1), 16000)[0]
    assert len(y) == int(n / factor + 0.5)
    assert 0 <= len(ref) - len(y) <= 1  # Lhotse rounds the length up
    np.testing.assert_allclose(y, ref[: len(y)], atol=1e-6)
    t = speed_perturb(torch.from_numpy(x), 16000, factor)  # tensors in, tensors out
    assert isinstance(t, torch.Tensor) and np.array_equal(t.numpy(), y)


@pytest.mark.parametrize("orig,new", [(8000, 16000), (44100, 16000), (22050, 16000)])
def test_resample_is_lhotses_sinc_resampler(orig, new):
    import torch
    from lhotse.augmentation.torchaudio import get_or_create_resampler

    x = (0.1 * np.random.default_rng(orig).standard_normal(orig + 123)).astype(np.float32)
    ref = get_or_create_resampler(orig, new)(torch.from_numpy(x).unsqueeze(0))[0].numpy()
    y = resample(x, orig, new)
    assert y.shape == ref.shape
    np.testing.assert_allclose(y, ref, atol=1e-6)


def test_no_sox_torchaudio_or_scipy_needed():
    import subprocess
    import sys

    code = ("import sys, numpy as np\n"
            "from wenet_lhotse.features.augment import speed_perturb, resample\n"
            "x = np.zeros(16000, dtype=np.float32)\n"
            "speed_perturb(x, 16000, 1.1); resample(x, 16000, 8000)\n"
            "bad = [m for m in ('torchaudio', 'scipy', 'soxr', 'sox') if m in sys.modules]\n"
            "assert not bad, bad\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
