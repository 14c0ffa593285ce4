"""Features on the training device (features/device.py) equal the worker path on the CPU:
same speed factors, masks and trims from the same seeds, features within 1e-4."""

from __future__ import annotations

import io

import numpy as np
import pytest
import soundfile as sf
import torch
from lhotse import CutSet, Recording

from wenet_lhotse.features import PooledFeatures, WenetFbank, WenetFbankConfig, cut_seed
from wenet_lhotse.features.device import (
    DRAWS_KEY,
    WAV_KEY,
    WAV_LENGTHS_KEY,
    DeviceFeatures,
    collate_waves,
    plan_cut,
)
from wenet_lhotse.features.fbank import WenetMfcc, WenetMfccConfig, WhisperLogMel
from wenet_lhotse.formats.audio import load_samples, recording_from_bytes


def device_path(features: PooledFeatures, cuts, augment: bool, epoch: int = 0,
                device: str = "cpu"):
    """Worker side (plan_cut, collate_waves) on the CPU + training side (DeviceFeatures)
    on ``device``, in cut order, as the loader runs them (minus the DataLoader)."""
    waves, draws = [], []
    for cut in cuts:
        w, d = plan_cut(features.pipeline, cut, cut_seed(features.seed, epoch, cut.id), augment)
        waves.append(w)
        draws.append(d)
    wav, lens = collate_waves(waves)
    batch = {"keys": [c.id for c in cuts], WAV_KEY: wav, WAV_LENGTHS_KEY: lens,
             DRAWS_KEY: draws, "target": torch.zeros(len(cuts), 1)}
    p = features.pipeline
    out = DeviceFeatures(p.extractor, p.resample_to, device=device,
                         return_pcm=p.return_audio)(batch)
    return out, wav


def assert_same(worker, device_batch):
    feats, lens = worker.feats, worker.feats_lens
    assert torch.equal(device_batch["feats_lengths"], lens.to(torch.int32))
    t_max = int(lens.max())
    assert device_batch["feats"].shape == (feats.shape[0], t_max, feats.shape[2])
    diff = (device_batch["feats"] - feats[:, :t_max]).abs().max().item()
    assert diff <= 1e-4, diff
    # the same masks: exactly the same entries are zero (log-mel energies never are)
    assert torch.equal(device_batch["feats"] == 0, feats[:, :t_max] == 0)


@pytest.mark.parametrize("dither", [0.0, 0.1])
def test_device_path_equals_worker_path_with_full_augmentation(corpus_cuts, dither):
    ext = WenetFbank(WenetFbankConfig(num_mel_bins=80, dither=dither))
    features = PooledFeatures(ext, speed_perturb=True, spec_aug=True, spec_sub=True,
                              spec_trim=True, seed=7, return_audio=True)
    cuts = list(corpus_cuts)
    worker = features(CutSet.from_cuts(cuts), augment=True)
    batch, wav = device_path(features, cuts, augment=True)
    assert wav.dtype == torch.int16  # 16-bit sources travel as int16
    assert_same(worker, batch)
    assert list(batch)[:3] == ["keys", "feats", "feats_lengths"]  # WeNet's key order
    assert WAV_KEY not in batch and DRAWS_KEY not in batch
    # pcm: the speed-perturbed waveform, as the worker path returns it
    pcm, pcm_lens = worker.audio
    assert torch.equal(batch["pcm_length"], pcm_lens.to(torch.int32))
    assert (batch["pcm"] - pcm[:, : batch["pcm"].shape[1]]).abs().max() <= 1e-6
    # augmentation really happened: several factors, masks, trims
    factors = {round(len(p) / len(c.load_audio()[0]), 1) for p, c in
               zip([pcm[i, : pcm_lens[i]] for i in range(len(cuts))], cuts)}
    assert len(factors) > 1


def test_device_path_equals_worker_path_without_augmentation(corpus_cuts):
    ext = WenetFbank(WenetFbankConfig(num_mel_bins=80, dither=0.1))
    features = PooledFeatures(ext, speed_perturb=True, spec_aug=True, seed=3)
    cuts = list(corpus_cuts)[:6]
    worker = features(CutSet.from_cuts(cuts), augment=False)  # cv: no dither, no masks
    batch, _ = device_path(features, cuts, augment=False)
    assert_same(worker, batch)
    for row, n in zip(batch["feats"], batch["feats_lengths"]):  # no masks
        assert not (row[:n] == 0).any()


def test_other_epoch_other_draws(corpus_cuts):
    features = PooledFeatures(WenetFbank(), speed_perturb=True, spec_aug=True, seed=3)
    cuts = list(corpus_cuts)[:8]
    a, _ = device_path(features, cuts, augment=True, epoch=0)
    b, _ = device_path(features, cuts, augment=True, epoch=1)
    features.set_epoch(1)
    assert_same(features(CutSet.from_cuts(cuts), augment=True), b)
    assert not torch.equal(a["feats_lengths"], b["feats_lengths"]) or \
        not torch.equal(a["feats"] == 0, b["feats"] == 0)


def test_mfcc_and_resampling_on_the_device_path(tmp_path):
    rng = np.random.default_rng(0)
    cuts = []
    for i, sr in enumerate((8000, 22050, 16000)):
        path = tmp_path / f"u{i}.wav"
        sf.write(path, (0.1 * rng.standard_normal(sr * 2)).astype(np.float32), sr,
                 subtype="FLOAT")  # not 16-bit: travels as float32
        cuts.append(Recording.from_file(path).to_cut())
    ext = WenetMfcc(WenetMfccConfig(num_mel_bins=40, num_ceps=13, dither=0.0))
    features = PooledFeatures(ext, speed_perturb=True, spec_aug=True, seed=1)
    worker = features(CutSet.from_cuts(cuts), augment=True)
    batch, wav = device_path(features, cuts, augment=True)
    assert wav.dtype == torch.float32
    assert_same(worker, batch)


def test_whisper_log_mel_is_refused():
    with pytest.raises(ValueError, match="features_on: device"):
        DeviceFeatures(WhisperLogMel())


def test_load_samples_int16_equals_lhotse_float(corpus_cuts, tmp_path):
    cut = list(corpus_cuts)[0]
    pcm, sr = load_samples(cut)
    assert pcm.dtype == np.int16 and sr == cut.sampling_rate
    np.testing.assert_array_equal(pcm.astype(np.float32) / 32768, cut.load_audio()[0])
    # in-memory bytes (WeNet shards) too
    mem = Recording.from_bytes(open(cut.recording.sources[0].source, "rb").read(),
                               recording_id=cut.id).to_cut()
    pcm2, _ = load_samples(mem)
    assert pcm2.dtype == np.int16 and np.array_equal(pcm, pcm2)
    # a segment of a recording falls back to Lhotse's float32 decoding
    seg = cut.truncate(offset=0.5, duration=0.5)
    x, _ = load_samples(seg)
    assert x.dtype == np.float32 and np.array_equal(x, seg.load_audio()[0])
    # FLAC 16-bit is read as int16 as well
    buf = io.BytesIO()
    sf.write(buf, pcm, sr, format="FLAC", subtype="PCM_16")
    flac = Recording.from_bytes(buf.getvalue(), recording_id="f").to_cut()
    pcm3, _ = load_samples(flac)
    assert pcm3.dtype == np.int16 and np.array_equal(pcm, pcm3)


def test_recording_from_bytes_is_lhotses_manifest(corpus_cuts):
    data = open(list(corpus_cuts)[0].recording.sources[0].source, "rb").read()
    ours, ref = recording_from_bytes(data, "k"), Recording.from_bytes(data, recording_id="k")
    assert ours == ref
    assert np.array_equal(ours.load_audio(), ref.load_audio())
    from lhotse.audio.utils import AudioLoadingError

    with pytest.raises(AudioLoadingError):  # not audio: Lhotse's own error
        recording_from_bytes(b"not audio at all", "k")


# ------------------------------------------------------------------ through the loader

LOADER_CONF = {
    "fbank_conf": {"num_mel_bins": 80, "frame_shift": 10, "frame_length": 25, "dither": 0.1},
    "speed_perturb": True, "spec_aug": True, "spec_sub": True, "spec_trim": True,
    "batch_conf": {"batch_type": "static", "batch_size": 4},
}


def epoch_batches(source, units, conf, split, workers=1):
    from wenet_lhotse.loader.build import build_dataloader
    from wenet_lhotse.text import CharTokenizer

    _, loader = build_dataloader(str(source), CharTokenizer(units), conf, split,
                                 num_workers=workers, seed=11)
    return list(loader)


@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    from wenet_lhotse.corpus import generate_corpus

    return generate_corpus(tmp_path_factory.mktemp("dev"), num_utterances=16,
                           min_duration=1.0, max_duration=3.0, shard_size=4, seed=5)


@pytest.mark.parametrize("kind", ["raw", "shard"])
@pytest.mark.parametrize("split", ["train", "cv"])
def test_loader_device_path_equals_worker_path(sharded, kind, split):
    """A real DataLoader worker: same keys and order, same features (dither on), same
    masks; the device path's worker sends int16 waveforms instead of features."""
    source = sharded.data_list if kind == "raw" else sharded.shards_list
    device_conf = {**LOADER_CONF, "lhotse_conf": {"features_on": "device", "device": "cpu",
                                                  "return_pcm": True}}
    worker_conf = {**LOADER_CONF, "lhotse_conf": {"return_pcm": True}}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the worker path's workers: same float rounding
    try:
        worker = epoch_batches(source, sharded.units, worker_conf, split)
        device = epoch_batches(source, sharded.units, device_conf, split)
    finally:
        torch.set_num_threads(threads)
    assert [b["keys"] for b in device] == [b["keys"] for b in worker]
    assert sum(len(b["keys"]) for b in worker) == 16
    for w, d in zip(worker, device):
        assert list(d) == list(w)  # the same keys in WeNet's order
        assert torch.equal(d["feats_lengths"], w["feats_lengths"])
        assert d["feats"].shape == w["feats"].shape
        assert (d["feats"] - w["feats"]).abs().max() <= 1e-4
        assert torch.equal(d["feats"] == 0, w["feats"] == 0)  # same masks and padding
        assert torch.equal(d["target"], w["target"])
        assert torch.equal(d["pcm_length"], w["pcm_length"])
        assert (d["pcm"] - w["pcm"]).abs().max() <= 1e-6


def test_device_path_config_errors(sharded):
    conf = {**LOADER_CONF, "lhotse_conf": {"features_on": "gpu"}}
    with pytest.raises(ValueError, match="lhotse_conf.features_on"):
        epoch_batches(sharded.data_list, sharded.units, conf, "train", workers=0)
    conf = {**LOADER_CONF, "lhotse_conf": {"features_on": "device", "device": "nonsense"}}
    with pytest.raises(ValueError, match="lhotse_conf.device"):
        epoch_batches(sharded.data_list, sharded.units, conf, "train", workers=0)
    conf = {**LOADER_CONF, "feats_type": "log_mel_spectrogram",
            "lhotse_conf": {"features_on": "device"}}
    with pytest.raises(ValueError, match="features_on: device supports"):
        epoch_batches(sharded.data_list, sharded.units, conf, "train", workers=0)


def test_drop_in_computes_features_on_the_device(sharded):
    """Through WeNet's entry point (the drop-in), features_on: device gives the worker
    path's batches, and the workers send waveforms (the transform is in the loader)."""
    import argparse

    from wenet_lhotse.dropin.compat import init_dataset_and_dataloader
    from wenet_lhotse.text import CharTokenizer

    def first_batches(lconf):
        args = argparse.Namespace(train_data=str(sharded.data_list),
                                  cv_data=str(sharded.data_list), data_type="raw",
                                  num_workers=1, pin_memory=False, prefetch=2)
        conf = {"dataset_conf": {**LOADER_CONF, "lhotse_conf": lconf}}
        _, _, train, _ = init_dataset_and_dataloader(args, conf, CharTokenizer(sharded.units),
                                                     seed=5)
        return train, list(train)[:2]

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        _, worker = first_batches({})
        loader, device = first_batches({"features_on": "device", "device": "cpu"})
    finally:
        torch.set_num_threads(threads)
    assert isinstance(loader.batch_transform, DeviceFeatures)
    for w, d in zip(worker, device):
        assert d["keys"] == w["keys"] and list(d) == list(w)
        assert torch.equal(d["feats_lengths"], w["feats_lengths"])
        assert (d["feats"] - w["feats"]).abs().max() <= 1e-4
