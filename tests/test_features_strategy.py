"""features.strategy: PooledFeatures gives the same features at any pool size,
deterministic augmentation, padding, and per-cut errors."""

from __future__ import annotations

import io

import numpy as np
import pytest
import soundfile as sf
import torch
from lhotse import CutSet, Recording

from wenet_lhotse.features import (
    PooledFeatures,
    WenetFbank,
    WenetFbankConfig,
    WenetMfcc,
    WenetMfccConfig,
    WhisperLogMel,
)

AUG = dict(speed_perturb=True, spec_aug=True, spec_sub=True, spec_trim=True,
           return_audio=True)


@pytest.fixture(scope="module")
def cuts(corpus):
    recs = [Recording.from_file(corpus.root / "wav" / f"{k}.wav", recording_id=k)
            for k in corpus.keys[:8]]
    return CutSet.from_cuts(r.to_cut() for r in recs)


@pytest.fixture(scope="module")
def pool2():
    pf = PooledFeatures(num_workers=2, seed=7, **AUG)
    yield pf
    pf.close()


def test_pool_size_does_not_change_results(cuts, pool2):
    inproc = PooledFeatures(num_workers=0, seed=7, **AUG)(cuts)
    pooled = pool2(cuts)
    assert [c.id for c in pooled.cuts] == [c.id for c in cuts]
    assert torch.equal(inproc.feats, pooled.feats)
    assert torch.equal(inproc.feats_lens, pooled.feats_lens)
    assert torch.equal(inproc.audio[0], pooled.audio[0])
    assert torch.equal(inproc.audio[1], pooled.audio[1])
    assert len(pool2.worker_pids) == 2


def test_outputs_shapes_padding_and_augmentation(cuts, pool2):
    feats, lens, kept, (pcm, pcm_lens) = pool2(cuts)
    assert feats.dtype == torch.float32 and lens.dtype == torch.int32
    assert pcm.dtype == torch.float32 and pcm_lens.dtype == torch.int32
    assert feats.shape == (len(cuts), int(lens.max()), 80)
    for i in range(len(cuts)):
        assert torch.all(feats[i, lens[i]:] == 0)
        assert torch.all(pcm[i, pcm_lens[i]:] == 0)
    plain = PooledFeatures(num_workers=0, return_audio=True)(cuts, augment=False)
    # Speed perturbation changes lengths for some cuts (factor 0.9/1.1 drawn per cut)...
    assert not torch.equal(pcm_lens, plain.audio[1])
    ratios = pcm_lens.double() / plain.audio[1].double()
    assert all(any(abs(r - 1 / f) < 1e-3 for f in (0.9, 1.0, 1.1)) for r in ratios.tolist())
    # ... and spec_aug zeroes whole frames and bins.
    first = feats[0, : lens[0]]
    assert torch.any(torch.all(first == 0, dim=1)) and torch.any(torch.all(first == 0, dim=0))


def test_augment_false_is_plain_wenet_fbank(cuts, pool2):
    feats, lens, _, (pcm, pcm_lens) = pool2(cuts, augment=False)
    ex = WenetFbank(WenetFbankConfig(dither=0.0))
    for i, cut in enumerate(cuts):
        audio = cut.load_audio()[0]
        assert np.array_equal(pcm[i, : pcm_lens[i]].numpy(), audio)
        want = ex.extract(audio, 16000)
        assert lens[i] == want.shape[0]
        assert np.array_equal(feats[i, : lens[i]].numpy(), want)


def test_determinism_seed_and_epoch(cuts):
    dithered = WenetFbank(WenetFbankConfig(dither=0.1))
    a = PooledFeatures(dithered, num_workers=0, seed=1, **AUG)
    b = PooledFeatures(dithered, num_workers=0, seed=1, **AUG)
    first = a(cuts).feats
    assert torch.equal(first, b(cuts).feats)
    assert torch.equal(first, a(cuts).feats)  # same epoch, same randomness
    a.set_epoch(1)
    assert not torch.equal(first, a(cuts).feats)
    assert torch.equal(a(cuts).feats, b(cuts, epoch=1).feats)
    c = PooledFeatures(dithered, num_workers=0, seed=2, **AUG)
    assert not torch.equal(first, c(cuts).feats)
    # A cut's result does not depend on its batch-mates or position.
    sub = CutSet.from_cuts(list(cuts)[3:5][::-1])
    res = b(sub, epoch=1)
    full = b(cuts, epoch=1)
    n = int(res.feats_lens[1])
    assert torch.equal(res.feats[1, :n], full.feats[3, :n])


def test_resample_to_16k_and_in_memory_audio(corpus, tmp_path):
    wav = corpus.root / "wav" / f"{corpus.keys[0]}.wav"
    x, sr = sf.read(wav, dtype="float32")
    path8k = tmp_path / "a8k.wav"
    sf.write(path8k, x[::2], 8000, subtype="PCM_16")
    buf = io.BytesIO()
    sf.write(buf, x, sr, format="WAV", subtype="PCM_16")
    cuts = CutSet.from_cuts([
        Recording.from_file(path8k, recording_id="r8k").to_cut(),
        Recording.from_bytes(buf.getvalue(), recording_id="mem").to_cut(),
    ])
    with PooledFeatures(num_workers=2, return_audio=True) as pf:
        feats, lens, kept, (pcm, pcm_lens) = pf(cuts, augment=False)
    assert int(pcm_lens[0]) == int(np.ceil(len(x[::2]) * 2))  # now 16 kHz
    assert int(lens[1]) == WenetFbank().extract(x, sr).shape[0]


@pytest.mark.parametrize("extractor", [WenetMfcc(WenetMfccConfig(num_mel_bins=40, num_ceps=20)),
                                       WhisperLogMel()], ids=["mfcc", "logmel"])
def test_other_feature_types_in_the_pool(cuts, extractor):
    sub = cuts.subset(first=3)
    with PooledFeatures(extractor, num_workers=1, spec_aug=True) as pf:
        feats, lens, _, _ = pf(sub, augment=False)
        aug, aug_lens, _, _ = pf(sub, augment=True)
    assert feats.shape[2] == extractor.feature_dim(16000)
    for i, cut in enumerate(sub):
        want = extractor.extract(cut.load_audio()[0], 16000)
        assert np.array_equal(feats[i, : lens[i]].numpy(), want)
    assert torch.equal(lens, aug_lens) and not torch.equal(feats, aug)  # masks applied
