"""PooledFeatures: pool-size independence, determinism, errors, and no leaked processes."""

from __future__ import annotations

import gc
import io
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch
from lhotse import CutSet, Recording
from torch.utils.data import DataLoader, Dataset

from wenet_lhotse.errors import WenetDataError
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


def pid_alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie counts as gone)."""
    try:
        import psutil

        return psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except ImportError:
        pass
    except Exception:  # psutil.NoSuchProcess between the two calls
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def wait_gone(pids, timeout: float = 15.0) -> list:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = [p for p in pids if pid_alive(p)]
        if not alive:
            return []
        time.sleep(0.1)
    return [p for p in pids if pid_alive(p)]


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


@pytest.fixture()
def cuts_with_bad(cuts, tmp_path):
    bad = tmp_path / "broken.wav"
    good = Path(list(cuts)[0].recording.sources[0].source)
    bad.write_bytes(good.read_bytes()[:44] + b"\x00garbage" * 3)  # header of a longer file
    rec = Recording.from_file(good, recording_id="broken")
    rec.sources[0].source = str(bad)
    items = list(cuts)[:3]
    return CutSet.from_cuts(items[:1] + [rec.to_cut()] + items[1:]), str(bad)


@pytest.mark.parametrize("workers", [0, 2])
def test_failing_cut_strict_and_fault_tolerant(cuts_with_bad, workers):
    batch, bad_path = cuts_with_bad
    strict = PooledFeatures(num_workers=workers)
    with pytest.raises(WenetDataError) as info:
        strict(batch, augment=False)
    assert "broken" in str(info.value) and bad_path in str(info.value)
    pids = strict.worker_pids
    # The pool survives a bad cut and stays usable.
    ok = strict(CutSet.from_cuts([c for c in batch if c.id != "broken"]), augment=False)
    assert len(ok.cuts) == 3
    tolerant = PooledFeatures(num_workers=workers, fault_tolerant=True)
    res = tolerant(batch, augment=False)
    assert [c.id for c in res.cuts] == [c.id for c in batch if c.id != "broken"]
    assert res.feats.shape[0] == 3 and tolerant.num_failed == 1
    assert tolerant.skip_report.items[0].source == bad_path
    pids += tolerant.worker_pids
    del strict, tolerant, res, ok, info  # a traceback keeps its frames (and self) alive
    gc.collect()
    assert wait_gone(pids) == []


def test_close_and_gc_leave_no_processes(cuts):
    pf = PooledFeatures(num_workers=2)
    pf(cuts)
    pids = pf.worker_pids
    assert all(pid_alive(p) for p in pids)
    pf.close()
    assert wait_gone(pids, 5) == []
    pf(cuts)  # a closed object starts a fresh pool on demand
    pids = pf.worker_pids
    del pf
    gc.collect()
    assert wait_gone(pids, 5) == []


_CHILD_SCRIPT = textwrap.dedent("""
    import os, sys, time
    from lhotse import CutSet, Recording
    from wenet_lhotse.features import PooledFeatures
    cuts = CutSet.from_cuts([Recording.from_file(sys.argv[1]).to_cut()])
    pf = PooledFeatures(num_workers=2)
    pf(cuts)
    print(" ".join(map(str, pf.worker_pids)), flush=True)
    if sys.argv[2] == "hang":
        time.sleep(60)
""")


@pytest.mark.parametrize("how", ["exit", "sigkill"])
def test_no_orphans_after_interpreter_exit_or_kill(corpus, how):
    wav = str(corpus.root / "wav" / f"{corpus.keys[0]}.wav")
    proc = subprocess.Popen([sys.executable, "-c", _CHILD_SCRIPT, wav,
                             "hang" if how == "sigkill" else "exit"],
                            stdout=subprocess.PIPE, text=True)
    pids = [int(p) for p in proc.stdout.readline().split()]
    assert len(pids) == 2
    if how == "sigkill":
        os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait(timeout=30) in (0, -signal.SIGKILL)
    assert wait_gone(pids, 10) == []


class _PooledDataset(Dataset):
    """A map-style dataset over batches of cuts, as the real ASR dataset uses it."""

    def __init__(self, features: PooledFeatures) -> None:
        self.features = features

    def __getitem__(self, cuts: CutSet):
        feats, lens, _, _ = self.features(cuts)
        return {"feats": feats, "lens": lens, "pid": os.getpid(),
                "pool": self.features.worker_pids}


@pytest.mark.parametrize("persistent", [False, True])
def test_dataloader_worker_pool_cleaned_up_mid_epoch(cuts, persistent):
    batches = [cuts.subset(first=2), cuts.subset(first=3), cuts.subset(first=4)] * 3
    features = PooledFeatures(num_workers=2, **AUG)
    features(batches[0])  # a pool in this process first: forked workers must not use it
    main_pool = features.worker_pids
    loader = DataLoader(_PooledDataset(features), sampler=batches, batch_size=None,
                        num_workers=1, persistent_workers=persistent)
    if persistent:  # a full epoch first, then stop in the middle of the second
        assert len(list(loader)) == len(batches)
    it = iter(loader)
    batch = next(it)
    worker_pid, pool = batch["pid"], batch["pool"]
    assert worker_pid != os.getpid() and len(pool) == 2  # pool inside a daemonic worker
    assert not set(pool) & set(main_pool)
    # Same features as computed in this process.
    ref = PooledFeatures(num_workers=0, **AUG)(batches[0])
    assert torch.equal(batch["feats"], ref.feats)
    del it, loader
    gc.collect()
    assert wait_gone([worker_pid, *pool]) == []
    assert all(pid_alive(p) for p in main_pool)  # the main pool is untouched
    features.close()
    assert wait_gone(main_pool, 5) == []


def test_killed_worker_is_reported_and_pool_restarts(cuts):
    pf = PooledFeatures(num_workers=2)
    pf(cuts)
    victim = pf.worker_pids[0]
    os.kill(victim, signal.SIGKILL)
    assert wait_gone([victim], 5) == []
    with pytest.raises(RuntimeError, match="feature worker"):
        pf(cuts)
    res = pf(cuts)  # the broken pool was closed; a fresh one serves this call
    assert len(res.cuts) == len(cuts) and victim not in pf.worker_pids
    pids = pf.worker_pids
    pf.close()
    assert wait_gone(pids, 5) == []


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
