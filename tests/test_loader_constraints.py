"""WeNet's batch_conf as Lhotse sampling constraints, driven by Lhotse's own
``DynamicBucketingSampler(constraint=...)``; lengths checked against the real features."""

from __future__ import annotations

import math
import random
import warnings

import numpy as np
import pytest
from lhotse import CutSet, Recording
from lhotse.dataset.sampling.dynamic_bucketing import DynamicBucketingSampler

from wenet_lhotse.features.augment import resample, speed_perturb
from wenet_lhotse.features.fbank import extractor_from_wenet_conf
from wenet_lhotse.features.recipe import (
    CutLengths,
    FrameCounter,
    cut_lengths_from_wenet_conf,
    planned_speed,
)
from wenet_lhotse.features.strategy import PooledFeatures
from wenet_lhotse.loader.constraints import (
    BucketBatchConstraint,
    MaxFramesConstraint,
    StaticBatchConstraint,
    wenet_constraint,
)


def _cuts(n: int, seed: int = 0, sampling_rate: int = 16000, lo: float = 0.3, hi: float = 6.0
          ) -> CutSet:
    """Real Lhotse cuts (recordings with exact sample counts; no audio is read)."""
    rng = random.Random(seed)
    cuts = []
    for i in range(n):
        num = int(rng.uniform(lo, hi) * sampling_rate)
        rec = Recording(id=f"u{i:04d}", sources=[], sampling_rate=sampling_rate,
                        num_samples=num, duration=num / sampling_rate)
        cuts.append(rec.to_cut())
    return CutSet.from_cuts(cuts)


def _sample(cuts, constraint, bins, shuffle=True, seed=0, epoch=0):
    constraint.set_epoch(epoch)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # eager CutSet, single oversized cuts
        sampler = DynamicBucketingSampler(cuts, constraint=constraint, duration_bins=bins,
                                          shuffle=shuffle, seed=seed, buffer_size=10000)
        sampler.set_epoch(epoch)
        return [list(b) for b in sampler]


# ---------------------------------------------------------------------------- lengths


@pytest.mark.parametrize("feats", [
    {"feats_type": "fbank", "fbank_conf": {"num_mel_bins": 23, "frame_length": 25,
                                           "frame_shift": 10}},
    {"feats_type": "mfcc", "mfcc_conf": {"num_mel_bins": 40, "frame_length": 32,
                                         "frame_shift": 12}},
    {"feats_type": "log_mel_spectrogram", "log_mel_spectrogram_conf": {"hop_length": 160,
                                                                       "padding": 37}},
])
def test_frames_equal_the_pipelines_features(corpus, feats, tmp_path):
    """The planned speed factor and frame count of every cut equal what the feature
    pipeline produces for it (resampling 22.05 kHz -> 16 kHz, speed perturbation on)."""
    import soundfile as sf

    cuts = []
    for i, path in enumerate(sorted((corpus.root / "wav").glob("*.wav"))[:8]):
        audio, sr = sf.read(path, dtype="float32")
        if i % 2:  # half of them at another rate: resampled by the pipeline first
            out = tmp_path / f"r{i}.wav"
            sf.write(out, audio[: len(audio) - 7 * i], 22050)
            path = out
        cuts.append(Recording.from_file(path, recording_id=f"c{i}").to_cut())
    conf = {**feats, "speed_perturb": True, "resample_conf": {"resample_rate": 16000}}
    seed = 11
    lengths = cut_lengths_from_wenet_conf(conf, train=True, seed=seed)
    features = PooledFeatures(extractor_from_wenet_conf(conf), speed_perturb=True, seed=seed)
    seen = set()
    for epoch in (0, 3):
        lengths.set_epoch(epoch)
        features.set_epoch(epoch)
        feats_out = features(CutSet.from_cuts(cuts), augment=True)
        for cut, n in zip(feats_out.cuts, feats_out.feats_lens.tolist()):
            assert lengths.frames(cut) == n, (cut.id, epoch)
            seen.add(lengths.speed(cut))
    assert seen == {0.9, 1.0, 1.1}  # every factor was exercised


def test_speed_is_seeded_by_seed_epoch_and_cut():
    a = [planned_speed(1, 0, f"u{i}", (0.9, 1.0, 1.1)) for i in range(60)]
    assert a == [planned_speed(1, 0, f"u{i}", (0.9, 1.0, 1.1)) for i in range(60)]
    assert a != [planned_speed(1, 1, f"u{i}", (0.9, 1.0, 1.1)) for i in range(60)]
    assert a != [planned_speed(2, 0, f"u{i}", (0.9, 1.0, 1.1)) for i in range(60)]


def test_frame_counter_kaldi_framing():
    fc = FrameCounter.from_wenet_conf({"fbank_conf": {"frame_length": 25, "frame_shift": 10}})
    assert fc.frames(16000, 16000) == 1 + (16000 - 400) // 160
    assert fc.frames(399, 16000) == 0
    # sox's length after speed perturbation, floor(n / f + 0.5), not ceil(n / f)
    assert fc.num_samples(16000, 16000, 1.1) == 14545 < math.ceil(16000 * 16000 / 17600)


def test_planned_samples_are_the_pipelines():
    """Planned lengths are the lengths speed perturbation and resampling return, sample
    for sample, over many lengths (a one-sample slip moves a frame now and then)."""
    fc = FrameCounter(resample_to=16000)
    rng = random.Random(0)
    for _ in range(200):
        n = rng.randint(16000, 16000 * 15)
        for speed in (0.9, 1.0, 1.1):
            real = len(speed_perturb(np.zeros(n, np.float32), 16000, speed))
            assert fc.num_samples(n, 16000, speed) == real, (n, speed)
    for _ in range(40):  # long 22.05 kHz audio, where float32 rounding once slipped
        n = rng.randint(22050 * 60, 22050 * 150)
        real = len(resample(np.zeros(n, np.float32), 22050, 16000))
        assert fc.num_samples(n, 22050) == real, n


# ---------------------------------------------------------------------------- static


def test_static_exactly_batch_size_with_lhotse_sampler():
    """One bucket: every batch has exactly B cuts except the last; ceil(N/B) batches."""
    cuts = _cuts(203)
    c = StaticBatchConstraint(CutLengths(), batch_size=8)
    batches = _sample(cuts, c, bins=[])
    assert [len(b) for b in batches[:-1]] == [8] * (len(batches) - 1)
    assert len(batches) == math.ceil(203 / 8)
    assert sorted(c.id for b in batches for c in b) == sorted(cut.id for cut in cuts)


@pytest.mark.parametrize("batch_size,max_cuts,added", [(8, None, 0), (8, 5, 0), (8, None, 3),
                                                       (1, None, 0), (4, 9, 2)])
def test_static_close_after_is_lhotses_readiness_test(batch_size, max_cuts, added):
    """``close_after(n)`` (the sampler's shortcut for Lhotse's ``_is_ready``) answers what
    adding n cuts one by one to a copy answers, Lhotse's way, for every n."""
    cuts = list(_cuts(12, seed=5))
    c = StaticBatchConstraint(CutLengths(), max_cuts=max_cuts, batch_size=batch_size)
    for cut in cuts[:added]:
        c.add(cut)
    for n in range(len(cuts) + 1):
        tot = c.copy()
        lhotse_ready = False
        for cut in cuts[:n]:
            tot.add(cut)
            if tot.close_to_exceeding():
                lhotse_ready = True
                break
        assert c.close_after(n) == lhotse_ready, n


def test_static_buckets_hold_similar_durations():
    cuts = _cuts(400, seed=3)
    c = StaticBatchConstraint(CutLengths(), batch_size=10)
    batches = _sample(cuts, c, bins=[1.5, 3.0, 4.5])
    assert all(len(b) <= 10 for b in batches)
    assert sum(len(b) == 10 for b in batches) >= len(batches) - 4  # one partial per bucket
    for b in batches:  # each batch from one bucket
        assert len({int(np.digitize(x.duration, [1.5, 3.0, 4.5], right=True)) for x in b}) == 1


# ---------------------------------------------------------------------------- dynamic


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_max_frames_is_a_hard_cap_after_speed_perturbation(seed):
    """Lhotse's sampler with shuffled buckets: never utterances x longest > cap,
    frames counted after the epoch's planned speed factors."""
    cuts = _cuts(600, seed=seed, lo=0.2, hi=12.0)
    lengths = CutLengths(FrameCounter(), speeds=(0.9, 1.0, 1.1), seed=seed)
    cap = 3000
    c = MaxFramesConstraint(lengths, max_frames=cap)
    bins = [1.0, 2.0, 3.5, 5.0, 7.0, 9.0]
    for epoch in (0, 1):
        batches = _sample(cuts, c, bins, seed=seed, epoch=epoch)
        lengths.set_epoch(epoch)
        worst = max(len(b) * max(lengths.frames(x) for x in b) for b in batches if len(b) > 1)
        assert worst <= cap
        assert worst > 0.8 * cap  # batches are filled, not trivially small
        assert sum(len(b) for b in batches) == 600


def test_lhotse_time_constraint_overshoots_where_ours_does_not():
    """Why the constraint exists: Lhotse's TimeConstraint lets the last cut overshoot."""
    cuts = _cuts(600, seed=5, lo=0.2, hi=12.0)
    bins = [1.0, 2.0, 3.5, 5.0, 7.0, 9.0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sampler = DynamicBucketingSampler(cuts, max_duration=30.0, duration_bins=bins,
                                          shuffle=True, seed=0, buffer_size=10000)
        worst = max(len(b) * max(c.duration for c in b) for b in sampler)
    assert worst > 30.0
    ours = _sample(cuts, MaxFramesConstraint(CutLengths(), max_frames=3000), bins)
    lengths = CutLengths()
    assert max(len(b) * max(lengths.frames(c) for c in b) for b in ours) <= 3000


# ---------------------------------------------------------------------------- bucket


def test_bucket_sizes_are_wenet_buckets():
    bounds, sizes = [200, 400, 600], [12, 8, 4, 2]
    lengths = CutLengths(FrameCounter(), speeds=(0.9, 1.0, 1.1), seed=4)
    c = BucketBatchConstraint(lengths, boundaries=bounds, batch_sizes=sizes)
    cuts = _cuts(500, seed=4, lo=0.5, hi=8.0)
    batches = _sample(cuts, c, bins=[2.0, 4.0, 6.0])  # values unused: WeNet's buckets
    full = 0
    for b in batches:
        ids = {c.wenet_bucket(lengths.frames(x)) for x in b}
        assert len(ids) == 1  # one WeNet bucket per batch
        assert len(b) <= sizes[ids.pop()]
        full += len(b) == sizes[c.wenet_bucket(max(lengths.frames(x) for x in b))]
    assert full >= len(batches) - 4
    # WeNet's rule: a length equal to a boundary goes to the next bucket
    assert c.wenet_bucket(199) == 0 and c.wenet_bucket(200) == 1 and c.wenet_bucket(10**6) == 3


def test_bucket_needs_matching_bins():
    c = BucketBatchConstraint(CutLengths(), boundaries=[200, 400], batch_sizes=[4, 2, 1])
    with pytest.raises(ValueError, match="3 buckets"):
        _sample(_cuts(20), c, bins=[1.0])


# ---------------------------------------------------------------------------- factory


def test_factory_reads_batch_conf_and_names_bad_keys():
    lengths = CutLengths()
    assert isinstance(wenet_constraint(None, lengths), StaticBatchConstraint)
    assert wenet_constraint({"batch_type": "static", "batch_size": 5}, lengths).batch_size == 5
    dyn = wenet_constraint({"batch_type": "dynamic", "max_frames_in_batch": 900}, lengths)
    assert isinstance(dyn, MaxFramesConstraint) and dyn.max_frames == 900
    with pytest.raises(ValueError, match="batch_conf.batch_type"):
        wenet_constraint({"batch_type": "dynamc"}, lengths)
    with pytest.raises(ValueError, match="bucket_batch_sizes"):
        wenet_constraint({"batch_type": "bucket", "bucket_boundaries": [100],
                          "bucket_batch_sizes": [1]}, lengths)
    cv = cut_lengths_from_wenet_conf({"speed_perturb": True}, train=False, seed=0)
    assert cv.speeds is None  # no perturbation outside training
