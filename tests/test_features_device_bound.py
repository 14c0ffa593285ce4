"""The device path's tolerance derived from float64 references (tests/feature_bounds.py),
run on the CPU device here so that the derivation itself is tested on every machine;
tests/test_features_device_cuda.py applies the same derivation on CUDA (issue 30)."""

from __future__ import annotations

import pytest
import torch
from feature_bounds import FACTOR, derive, plain
from lhotse import CutSet
from test_features_device import device_path

from wenet_lhotse.features import PooledFeatures, WenetFbank, WenetFbankConfig


@pytest.fixture(autouse=True)
def one_cpu_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("dither", [0.0, 0.1])
def test_the_derived_bound_holds_on_the_cpu_device(corpus_cuts, dither):
    cuts = list(corpus_cuts)
    bound = derive(plain(dither), cuts, "cpu")
    bound.check()
    # the references measure something: float32 rounding is not zero, and the bound
    # stays far below the log-mel scale (a broken reference would give ~1-10)
    assert 0 < bound.e_worker < 1e-2 and bound.tolerance < 5e-2, bound
    # with every augmentation on, the same draws stay within the derived tolerance
    ext = WenetFbank(WenetFbankConfig(num_mel_bins=80, dither=dither))
    full = PooledFeatures(ext, speed_perturb=True, spec_aug=True, spec_sub=True,
                          spec_trim=True, seed=7, return_audio=True)
    worker = full(CutSet.from_cuts(cuts), augment=True)
    batch = device_path(full, cuts, True, device="cpu")[0]
    t = int(worker.feats_lens.max())
    diff = (batch["feats"] - worker.feats[:, :t]).abs().max().item()
    assert diff <= bound.tolerance, (diff, bound)


def test_a_worse_device_fbank_fails_the_check():
    """The check can fail: a device error FACTOR x the CPU's and more is refused."""
    from feature_bounds import Bound

    with pytest.raises(AssertionError, match="exceeds"):
        Bound(e_worker=1e-4, e_device=FACTOR * 1e-4 * 1.01, e_wave=0.0).check()
    Bound(e_worker=1e-4, e_device=FACTOR * 1e-4, e_wave=0.0).check()


def test_the_tolerance_the_cuda_tests_use_derives_on_the_cpu(corpus_cuts):
    """``derived_tolerance`` (what test_features_device_cuda.py calls on ``cuda``)."""
    from feature_bounds import derived_tolerance

    tol = derived_tolerance(list(corpus_cuts)[:4], "cpu")
    assert 0 < tol < 5e-2
