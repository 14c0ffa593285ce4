"""Features on the training device (``lhotse_conf.features_on: device``,
``features/device.py``) on CUDA equal the worker path's: same keys, lengths and masks,
features within a tolerance *derived on the same GPU in the same run*.

Runs where a CUDA device is present; elsewhere every test skips and says so (an allowed
skip: a machine without a GPU cannot run it; ``tests/test_features_device.py`` checks the
same path on the CPU to 1e-4 everywhere, and ``tests/test_features_device_bound.py`` runs
the derivation below on the CPU device). The bound (issue 30: a fixed 5e-3 tuned on one
H200 failed on an H100 at 9.67e-3): CUDA's FFT and matrix products round differently from
the CPU's, which near-silent low mel bins turn into log-mel differences of a few 1e-3.
``tests/feature_bounds.py`` computes each path's fbank again in float64 on the GPU from
that path's own waveform and measures each float32 error against it; the GPU's error
must be at most ``FACTOR`` (4) times the CPU worker path's, and the paths may then differ
by ``e_worker + FACTOR * e_worker + e_wave`` (``e_wave``: the float64 effect of the two
waveforms' own rounding) -- a bound that follows each card's rounding, not one card's.
"""

from __future__ import annotations

import pytest
import torch
from lhotse import CutSet
from test_features_device import device_path

from wenet_lhotse.features import PooledFeatures, WenetFbank, WenetFbankConfig
from wenet_lhotse.features.device import (
    DRAWS_KEY,
    WAV_KEY,
)

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="no CUDA device here: the device path on CUDA is checked where a GPU is present "
           "(tests/test_features_device.py checks it on the CPU)")

_TOL: dict = {}


def cuda_tol(cuts) -> float:
    """The derived tolerance for ``cuts`` on this GPU (feature_bounds; memoised)."""
    from feature_bounds import derived_tolerance

    key = tuple(c.id for c in cuts)
    if key not in _TOL:
        _TOL[key] = derived_tolerance(list(cuts), "cuda")
    return _TOL[key]


@pytest.fixture(autouse=True)
def one_cpu_thread():
    """The worker path's CPU side with one thread, as DataLoader workers run it."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def on_cuda(features: PooledFeatures, cuts, augment: bool, epoch: int = 0):
    """The worker half on the CPU, then :class:`DeviceFeatures` on ``cuda``, as the loader
    runs them (minus the DataLoader): test_features_device's path on another device."""
    return device_path(features, cuts, augment, epoch, device="cuda")[0]


def assert_close(worker_feats, worker_lens, device_batch, tol: float):
    """Same lengths, shape and zero entries (masks, padding); features within ``tol``."""
    assert device_batch["feats"].device.type == "cuda"
    assert torch.equal(device_batch["feats_lengths"].cpu(), worker_lens.to(torch.int32).cpu())
    t_max = int(worker_lens.max())
    want = worker_feats[:, :t_max].float().cpu()
    got = device_batch["feats"].float().cpu()
    assert got.shape == want.shape
    diff = (got - want).abs().max().item()
    assert diff <= tol, (diff, tol)
    assert torch.equal(got == 0, want == 0)  # the same masks: log-mel energies are never 0


@pytest.mark.parametrize("dither", [0.0, 0.1])
def test_cuda_device_path_equals_worker_path_with_full_augmentation(corpus_cuts, dither):
    ext = WenetFbank(WenetFbankConfig(num_mel_bins=80, dither=dither))
    features = PooledFeatures(ext, speed_perturb=True, spec_aug=True, spec_sub=True,
                              spec_trim=True, seed=7, return_audio=True)
    cuts = list(corpus_cuts)
    worker = features(CutSet.from_cuts(cuts), augment=True)
    batch = on_cuda(features, cuts, augment=True)
    assert_close(worker.feats, worker.feats_lens, batch, cuda_tol(cuts))
    assert WAV_KEY not in batch and DRAWS_KEY not in batch
    # pcm: the speed-perturbed waveform, as the worker path returns it
    pcm, pcm_lens = worker.audio
    assert torch.equal(batch["pcm_length"].cpu(), pcm_lens.to(torch.int32))
    got_pcm = batch["pcm"].float().cpu()
    assert (got_pcm - pcm[:, : got_pcm.shape[1]]).abs().max() <= 1e-4
    # augmentation really happened: several speed factors, and masked entries
    assert len({round(int(n) / c.num_samples, 1) for n, c in zip(pcm_lens, cuts)}) > 1
    assert (batch["feats"] == 0).any()


def test_cuda_device_path_equals_worker_path_without_augmentation(corpus_cuts):
    ext = WenetFbank(WenetFbankConfig(num_mel_bins=80, dither=0.1))
    features = PooledFeatures(ext, speed_perturb=True, spec_aug=True, seed=3)
    cuts = list(corpus_cuts)[:6]
    worker = features(CutSet.from_cuts(cuts), augment=False)  # cv: no dither, no masks
    batch = on_cuda(features, cuts, augment=False)
    assert_close(worker.feats, worker.feats_lens, batch, cuda_tol(cuts))
    for row, n in zip(batch["feats"], batch["feats_lengths"]):
        assert not (row[: int(n)] == 0).any()


@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    from wenet_lhotse.corpus import generate_corpus

    return generate_corpus(tmp_path_factory.mktemp("cuda"), num_utterances=16,
                           min_duration=1.0, max_duration=3.0, shard_size=4, seed=5)


LOADER_CONF = {
    "fbank_conf": {"num_mel_bins": 80, "frame_shift": 10, "frame_length": 25, "dither": 0.1},
    "speed_perturb": True, "spec_aug": True, "spec_sub": True, "spec_trim": True,
    "batch_conf": {"batch_type": "static", "batch_size": 4},
}


@pytest.mark.parametrize("kind", ["raw", "shard"])
def test_cuda_loader_device_path_equals_worker_path(sharded, kind):
    """Through ``build_dataloader`` with a real DataLoader worker: the workers send
    waveforms, the loader computes the features on ``cuda``; every batch equals the
    worker path's (keys and order, lengths, masks, features within the tolerance derived
    on these cuts)."""
    from wenet_lhotse.loader.build import build_dataloader
    from wenet_lhotse.text import CharTokenizer

    source = sharded.data_list if kind == "raw" else sharded.shards_list

    def epoch(lhotse_conf):
        _, loader = build_dataloader(str(source), CharTokenizer(sharded.units),
                                     {**LOADER_CONF, "lhotse_conf": lhotse_conf}, "train",
                                     num_workers=1, seed=11)
        return list(loader)

    worker = epoch({})
    device = epoch({"features_on": "device", "device": "cuda"})
    assert [b["keys"] for b in device] == [b["keys"] for b in worker]
    assert sum(len(b["keys"]) for b in worker) == 16
    from wenet_lhotse.formats import read_raw_list

    tol = cuda_tol(list(read_raw_list(sharded.data_list)))
    for w, d in zip(worker, device):
        assert list(d) == list(w)  # the same keys in WeNet's order
        assert_close(w["feats"], w["feats_lengths"], d, tol)
        assert torch.equal(d["target"], w["target"])
