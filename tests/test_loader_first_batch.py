"""What happens before the first batch: streamed workers start batching after
``INITIAL_FILL`` cuts (then their buffer grows to ``buffer_size``), deterministically;
bucket edges are estimated from the lengths the sampler compares them with (after speed
perturbation), by each streamed worker from its own first cuts; the training process
reads no tar, and a cv loader nothing until used."""

from __future__ import annotations

import logging
import os
import sys

import pytest
from lhotse import CutSet
from lhotse.testing.dummies import dummy_cut
from loader_common import Ids

from wenet_lhotse.errors import WenetDataError
from wenet_lhotse.features.recipe import CutLengths
from wenet_lhotse.loader import build_dataloader
from wenet_lhotse.loader.bins import estimate_bins
from wenet_lhotse.loader.bucketing import BucketingSampler
from wenet_lhotse.loader.constraints import StaticBatchConstraint
from wenet_lhotse.loader.streamed import INITIAL_FILL, WarmStartSampler


def _cuts(n: int):
    return [dummy_cut(i, duration=1.0 + (i * 7919 % 1400) / 100.0) for i in range(n)]


class Counted:
    """A cut iterable that counts how many cuts were read."""

    def __init__(self, cuts):
        self.cuts, self.read = cuts, 0

    def __iter__(self):
        for c in self.cuts:
            self.read += 1
            yield c


def _sampler(cls, cuts, buffer_size=2000):
    return cls(CutSet(cuts), constraint=StaticBatchConstraint(batch_size=16),
               duration_bins=estimate_bins(cuts.cuts if isinstance(cuts, Counted) else cuts,
                                           30), buffer_size=buffer_size, shuffle=True, seed=3)


def test_first_batch_after_initial_fill_then_the_buffer_grows():
    cuts = Counted(_cuts(3000))
    sampler = _sampler(WarmStartSampler, cuts)
    it = iter(sampler)
    first = next(it)
    assert len(first) == 16
    # the initial fill and the refill for the batch drawn; Lhotse's sampler reads
    # buffer_size (2,000) first
    assert cuts.read == INITIAL_FILL + 16
    batches = [first] + [next(it) for _ in range(12)]
    assert sampler._bucketer.remaining() >= 2000 - 16  # grown to the full buffer
    while True:  # (not list(it): iter() on a Lhotse sampler starts a new epoch)
        try:
            batches.append(next(it))
        except StopIteration:
            break
    ids = [c.id for b in batches for c in b]
    assert sorted(ids) == sorted(c.id for c in cuts.cuts)
    assert all(len(b) == 16 for b in batches[:-1])


def test_warm_start_is_deterministic_and_uses_every_cut_once():
    cuts = _cuts(1000)
    runs = [[[c.id for c in b] for b in _sampler(WarmStartSampler, cuts)] for _ in range(2)]
    assert runs[0] == runs[1]
    ids = [i for b in runs[0] for i in b]
    assert sorted(ids) == sorted(c.id for c in cuts)
    assert len(runs[0]) == -(-1000 // 16)  # WeNet's step count, as the plain sampler
    plain = [[c.id for c in b] for b in _sampler(BucketingSampler, cuts)]
    assert len(plain) == len(runs[0])


def test_bins_are_estimated_on_perturbed_lengths():
    from lhotse.dataset.sampling.dynamic_bucketing import estimate_duration_buckets

    cuts = _cuts(600)
    lengths = CutLengths(speeds=(0.9, 1.0, 1.1), seed=5)
    got = estimate_bins(cuts, 10, lengths)
    perturbed = [dummy_cut(0, duration=lengths.seconds(c)) for c in cuts]
    assert got == [float(b) for b in estimate_duration_buckets(perturbed, num_buckets=10)]
    assert got != estimate_bins(cuts, 10)
    assert estimate_bins(cuts, 10, CutLengths()) == estimate_bins(cuts, 10)  # no speeds


# ---------------------------------------------------------------- the training process

#: files opened by this process (not by DataLoader workers) while a test watches
_OPENED = {"on": False, "pid": 0, "paths": []}


def _audit(event, args):
    if event == "open" and _OPENED["on"] and os.getpid() == _OPENED["pid"] \
            and isinstance(args[0], (str, bytes, os.PathLike)):
        _OPENED["paths"].append(os.fsdecode(args[0]))


sys.addaudithook(_audit)  # audit hooks cannot be removed: this one is off unless watching


class _Watch:
    """Context: the paths this process opens (workers are other processes)."""

    def __enter__(self):
        _OPENED.update(on=True, pid=os.getpid(), paths=[])
        return _OPENED["paths"]

    def __exit__(self, *exc):
        _OPENED["on"] = False


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    from wenet_lhotse.corpus import generate_corpus

    root = tmp_path_factory.mktemp("startup")
    train = generate_corpus(root / "train", num_utterances=48, min_duration=0.5,
                            max_duration=6.0, shard_size=6, seed=11)
    cv = generate_corpus(root / "cv", num_utterances=12, min_duration=0.5, max_duration=4.0,
                         shard_size=4, seed=12, prefix="cv-")
    return train, cv


STREAMED = {"batch_conf": {"batch_type": "dynamic", "max_frames_in_batch": 1500},
            "speed_perturb": True, "lhotse_conf": {"num_buckets": 4, "buffer_size": 40}}


def _tars(paths):
    return [p for p in paths if p.endswith(".tar")]


def test_streamed_loaders_read_no_tar_in_the_training_process(shards):
    """Bucket edges are estimated by each worker from its own first cuts: building the
    train and cv loaders (given as WeNet's --data_type shard gives them) opens nothing,
    and a whole epoch with 2 workers opens no tar here."""
    train, cv = shards
    with _Watch() as opened:
        _, loader = build_dataloader({"path": str(train.shards_list), "type": "shard"}, None,
                                     STREAMED, "train", dataset=Ids(), num_workers=2, seed=3)
        _, cv_loader = build_dataloader({"path": str(cv.shards_list), "type": "shard"}, None,
                                        STREAMED, "cv", dataset=Ids(), num_workers=2, seed=3)
        assert not opened, "building the loaders opened files"
        keys = [k for b in loader for k in b]
        cv_keys = [k for b in cv_loader for k in b]
    assert sorted(keys) == sorted(train.keys) and sorted(cv_keys) == sorted(cv.keys)
    assert not _tars(opened)


def test_a_duration_budget_from_the_mean_reads_at_the_first_iter_not_at_build(shards):
    train, _ = shards
    conf = {"batch_conf": {"batch_type": "static", "batch_size": 4},
            "lhotse_conf": {"batch_by": "duration", "num_buckets": 4, "buffer_size": 40}}
    with _Watch() as opened:
        _, loader = build_dataloader({"path": str(train.shards_list), "type": "shard"}, None,
                                     conf, "cv", dataset=Ids(), num_workers=2)
        assert not opened
        keys = [k for b in loader for k in b]
    assert _tars(opened), "the mean duration is read here, before the workers start"
    assert sorted(keys) == sorted(train.keys)


def test_epochs_restored_mid_way_give_the_same_batches(shards):
    """Worker edges depend only on the worker's tars, the seed and the epoch (speed
    factors included): a fresh loader restored mid-epoch continues with the very batches
    of the uninterrupted run, in every epoch."""
    train, _ = shards

    def make():
        return build_dataloader(train.shards_list, None, STREAMED, "train", dataset=Ids(),
                                num_workers=2, seed=5)[1]

    ref = make()
    expected = [list(ref) for _ in range(3)]
    assert expected[0] != expected[1]
    for epoch in (0, 2):
        a = make()
        for _ in range(epoch):
            list(a)
        it = iter(a)
        got = [next(it) for _ in range(3)]
        b = make()
        b.load_state_dict(a.state_dict())
        assert got + list(b) == expected[epoch]


def test_worker_edges_are_logged_once(shards, caplog):
    train, _ = shards
    _, loader = build_dataloader(train.shards_list, None, STREAMED, "train", dataset=Ids())
    with caplog.at_level(logging.INFO, logger="wenet_lhotse.loader.bins"):
        list(loader)
        list(loader)
    logged = [r.getMessage() for r in caplog.records if "duration_bins (worker 0" in r.getMessage()]
    assert len(logged) == 1 and "epoch 0" in logged[0]


def test_cv_map_loader_reads_nothing_until_used(corpus, tmp_path):
    """A raw cv list is planned at the first iter() (or len()), not when built; a wrong
    path or a bad cv key still fails at build."""
    conf = {"batch_conf": {"batch_type": "static", "batch_size": 4}}
    with _Watch() as opened:
        _, loader = build_dataloader({"path": str(corpus.data_list), "type": "raw"}, None,
                                     conf, "cv", dataset=Ids())
        assert not opened
        n = len(loader)
    assert str(corpus.data_list) in opened
    assert n == 5 and sorted(k for b in loader for k in b) == sorted(corpus.keys)
    with pytest.raises(WenetDataError, match="no such file"):
        build_dataloader({"path": str(tmp_path / "missing.list"), "type": "raw"}, None, conf,
                         "cv", dataset=Ids())
    with pytest.raises(ValueError, match="batch_type"):
        build_dataloader(corpus.data_list, None, {"batch_conf": {"batch_type": "x"}}, "cv",
                         dataset=Ids())


def test_map_batches_do_not_depend_on_the_worker_count(corpus):
    """torch starts a multi-worker DataLoader iterator with two iter(sampler) calls: the
    first epoch is still epoch 0 (same batches as without workers), started once. (One
    worker: with more, static batches follow WeNet's step count for that many workers,
    see tests/test_wenet_batching.py.)"""
    conf = {"batch_conf": {"batch_type": "static", "batch_size": 4}, "speed_perturb": True}
    runs = []
    for workers in (0, 1):
        _, loader = build_dataloader(corpus.data_list, None, conf, "train", dataset=Ids(),
                                     num_workers=workers, seed=8)
        runs.append([list(loader), list(loader)])
        assert loader.epoch == 1
    assert runs[0] == runs[1]
