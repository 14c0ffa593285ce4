"""features.pool: the worker pool leaves no process behind (close, gc, exit, SIGKILL,
DataLoader workers), logs and replaces a worker killed between batches, names the cut
of one killed during a batch, and turns a failing cut into an error naming it."""

from __future__ import annotations

import gc
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
from adversarial import under_load
from lhotse import AudioSource, CutSet, Recording
from torch.utils.data import DataLoader, Dataset

from wenet_lhotse.errors import WenetDataError
from wenet_lhotse.features import (
    PooledFeatures,
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
    """The ``pids`` still alive after ``timeout`` s (a quiet machine's bound, stretched
    by the load: a process that has been told to end needs CPU to do so)."""
    deadline = time.monotonic() + under_load(timeout)
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
    from lhotse import AudioSource, CutSet, Recording
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


def wait_exited(pid: int, timeout: float = 15.0) -> bool:
    """True once our child ``pid`` has exited *and can be waited for*, without reaping it
    (``WNOWAIT``: the pool's own ``Process`` object still collects it). A killed
    multi-threaded process shows as a zombie before its last thread is gone, and until
    then ``waitpid`` does not report it: that is not "between batches" yet. ``timeout``
    is stretched by the load, as in :func:`wait_gone`."""
    deadline = time.monotonic() + under_load(timeout)
    while time.monotonic() < deadline:
        try:
            if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                return True
        except ChildProcessError:  # already collected (the executor saw the death first)
            return True
        time.sleep(0.02)
    return False


def test_worker_killed_between_batches_is_logged_and_replaced(cuts, caplog):
    pf = PooledFeatures(num_workers=2)
    pf(cuts)
    victim = pf.worker_pids[0]
    os.kill(victim, signal.SIGKILL)
    assert wait_exited(victim)
    with caplog.at_level(logging.WARNING, logger="wenet_lhotse.features.pool"):
        res = pf(cuts)  # no cut was in flight: nothing lost, a fresh pool serves it
    assert len(res.cuts) == len(cuts) and victim not in pf.worker_pids
    assert f"feature worker {victim} ended between batches (signal 9)" in caplog.text
    pids = pf.worker_pids
    pf.close()
    assert wait_gone(pids, 5) == []


def test_worker_killed_during_a_batch_names_the_cut_and_pool_restarts(cuts):
    # The cut's audio is a command that SIGKILLs the worker reading it ($PPID of the
    # shell Lhotse starts): a death in the middle of a batch, at a known cut.
    killer = Recording(id="killer", sources=[AudioSource(
        type="command", channels=[0], source="kill -9 $PPID; sleep 5")],
        sampling_rate=16000, num_samples=16000, duration=1.0).to_cut()
    pf = PooledFeatures(num_workers=2)
    pf(cuts)
    before = pf.worker_pids
    with pytest.raises(RuntimeError, match="feature worker died; cut 'killer'"):
        pf(CutSet.from_cuts([*cuts, killer]))
    assert wait_gone(before, 5) == []  # the broken pool was closed
    res = pf(cuts)  # a fresh one serves the next call
    assert len(res.cuts) == len(cuts) and not set(before) & set(pf.worker_pids)
    pids = pf.worker_pids
    pf.close()
    assert wait_gone(pids, 5) == []


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
