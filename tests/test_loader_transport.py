"""Batches through the shared-memory ring (loader/transport.py) equal the DataLoader's
ordinary transport, through real forked DataLoader workers; held batches are never
overwritten; slots are freed when the last tensor (or view) made from them dies."""

from __future__ import annotations

import gc
import pickle
import sys

import numpy as np
import pytest
import torch

from wenet_lhotse.dataset import padding
from wenet_lhotse.dataset.padding import pad_rows
from wenet_lhotse.loader.dataloader import LhotseDataLoader
from wenet_lhotse.loader.map_items import LoaderDataset
from wenet_lhotse.loader.transport import BatchRing, SlotBatch


class Batches(torch.utils.data.Dataset):
    """Batch ``i``: tensors of several dtypes and shapes (sizes vary with ``i``), and
    values that are not tensors."""

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        n = 1 + i % 5
        return {"keys": [f"u{i}-{j}" for j in range(n)],
                "feats": torch.randn(n, 7 + i, 3, generator=g),
                "feats_lengths": torch.arange(n, dtype=torch.int32) + i,
                "target": torch.randint(-1, 50, (n, 4), generator=g),
                "pcm": torch.randn(n, 100 * (i + 1), generator=g),
                "mask": torch.rand(n, generator=g) > 0.5,
                "empty": torch.zeros(0, 3),
                "scalar": torch.tensor(float(i)),
                "langs": ["zh"] * n}


def _loader(ring: bool, n: int = 12, **kw) -> LhotseDataLoader:
    return LhotseDataLoader(LoaderDataset(Batches()), sampler=range(n), num_workers=2,
                            persistent_workers=True, shared_ring=ring, **kw)


def _same(a, b) -> None:
    assert list(a) == list(b)
    for k in a:
        if isinstance(a[k], torch.Tensor):
            assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape, k
            assert torch.equal(a[k], b[k]), k
        else:
            assert a[k] == b[k], k


def test_ring_batches_equal_the_ordinary_path():
    plain = list(_loader(False))
    loader = _loader(True)
    assert loader.ring is not None
    got = []
    for batch in loader:
        assert not batch["feats"].is_shared()  # slot memory, not a fresh torch segment
        assert loader.ring.busy() >= 1
        got.append({k: v.clone() if isinstance(v, torch.Tensor) else v
                    for k, v in batch.items()})
        batch["feats"].add_(1.0)  # writable, as ordinary batches are
    for a, b in zip(plain, got):
        _same(a, b)
    assert len(got) == len(plain) == 12
    del batch
    gc.collect()
    assert loader.ring.busy() == 0
    # a second epoch over the same persistent workers reuses the slots
    for a, b in zip(plain, loader):
        _same(a, b)


def test_held_batches_are_never_overwritten():
    """The training loop keeps every batch: once the worker's slots are all held, batches
    go the ordinary way; the held ones keep their values."""
    plain = list(_loader(False, n=20))
    loader = _loader(True, n=20)
    held = list(loader)
    for a, b in zip(plain, held):
        _same(a, b)
    in_ring = sum(not b["feats"].is_shared() for b in held)
    assert 0 < in_ring <= loader.ring.num_workers * loader.ring.slots


def test_a_view_keeps_its_slot():
    loader = _loader(True, n=2)
    it = iter(loader)
    batch = next(it)
    view = batch["pcm"][:, 10:20]
    expected = view.clone()
    del batch
    gc.collect()
    busy = loader.ring.busy()
    assert busy >= 1
    list(it)  # more batches: the view's slot is not reused
    assert torch.equal(view, expected)
    del view
    gc.collect()
    assert loader.ring.busy() == 0


def test_batches_larger_than_a_slot_go_the_ordinary_way():
    plain = list(_loader(False, n=8))
    loader = _loader(False, n=8)
    loader.ring = loader.dataset.ring = BatchRing(2, slots=4, slot_bytes=4096)
    got = list(loader)
    for a, b in zip(plain, got):
        _same(a, b)
    small = [not b["feats"].is_shared() for b in got]
    assert any(small) and not all(small)  # the small first batches fit, later ones not


def test_no_ring_without_persistent_fork_workers():
    assert LhotseDataLoader(LoaderDataset(Batches()), sampler=range(2), num_workers=2,
                            persistent_workers=False).ring is None
    assert LhotseDataLoader(LoaderDataset(Batches()), sampler=range(2)).ring is None
    spawn = LhotseDataLoader(LoaderDataset(Batches()), sampler=range(2), num_workers=1,
                             persistent_workers=True, multiprocessing_context="spawn")
    assert spawn.ring is None


def test_a_received_batch_dropped_unread_frees_its_slot():
    ring = BatchRing(1, slots=2, slot_bytes=4096)
    ring._state[1] = 1
    sent = SlotBatch(ring.token, 1, [("keys", None, ["a"])])
    del sent  # the worker's own object: the slot stays in use
    assert ring.busy() == 1
    received = pickle.loads(pickle.dumps(SlotBatch(ring.token, 1, [])))
    del received  # e.g. a prefetched batch drained at an epoch's reset
    assert ring.busy() == 0
    with pytest.raises(TypeError):
        pickle.dumps(ring)


def test_a_batch_cut_short_in_transit_is_collected_without_a_traceback(monkeypatch):
    """A worker killed while sending leaves a half-unpickled ``SlotBatch`` (made, its
    state never set): collecting it must print nothing (WeNet's scripts end with one
    line then, not a traceback from ``__del__``)."""
    raised = []
    monkeypatch.setattr(sys, "unraisablehook", raised.append)
    # (protocol 2: no frames, so the opcodes before the cut run)
    data = pickle.dumps(SlotBatch(1, 0, [("keys", None, ["a"])]), protocol=2)
    build = data.rindex(pickle.BUILD)  # the object exists before its state is set
    with pytest.raises(Exception):  # noqa: B017 -- any unpickling error: the stream ends
        pickle.loads(data[:build])
    gc.collect()
    assert raised == []


class Padded(torch.utils.data.Dataset):
    """Batch ``i`` as the ASR dataset makes it: rows padded by ``pad_rows`` (into the
    worker's reserved slot when there is one), plus a tensor made elsewhere."""

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        n = 2 + i % 3
        rows = [torch.randn(5 + 3 * j + i, 4, generator=g) for j in range(n)]
        pcm = [torch.randn(50 * (j + 1) + i, generator=g) for j in range(n)]
        order = list(range(n))[::-1]
        return {"feats": pad_rows(rows, order, trailing=(4,)),
                "pcm": pad_rows(pcm, order, padding_value=-1.0),
                "target": torch.randint(0, 9, (n, 3), generator=g),
                "reserved": padding.row_allocator.get() is not None}


def _padded(ring: bool, n: int = 10) -> LhotseDataLoader:
    return LhotseDataLoader(LoaderDataset(Padded()), sampler=range(n), num_workers=2,
                            persistent_workers=True, shared_ring=ring)


def test_rows_padded_straight_into_the_slot_equal_the_ordinary_path():
    plain = [{k: v for k, v in b.items() if k != "reserved"} for b in _padded(False)]
    loader = _padded(True)
    got = list(loader)  # all held: later batches find no free slot to reserve
    assert got[0]["reserved"] and not all(b["reserved"] for b in got)
    for a, b in zip(plain, got):
        b.pop("reserved")
        _same(a, b)
    del got
    gc.collect()
    assert loader.ring.busy() == 0
    # slots reused by the next epoch: stale bytes of longer rows never show through
    for a, b in zip(plain, loader):
        b.pop("reserved")
        _same(a, b)


def test_a_reserved_batch_that_does_not_fit_is_cloned_out_of_the_slot():
    """The padded rows fit the slot, the rest of the batch does not: the batch goes the
    ordinary way, its rows cloned out of the slot the next batch reuses."""
    plain = [{k: v for k, v in b.items() if k != "reserved"} for b in _padded(False)]
    loader = _padded(False)
    loader.ring = loader.dataset.ring = BatchRing(2, slots=1, slot_bytes=1024)
    got = list(loader)
    assert any(b["reserved"] for b in got)
    for a, b in zip(plain, got):
        b.pop("reserved")
        _same(a, b)
    assert loader.ring.busy() == 0


@pytest.mark.parametrize("trailing", [(), (3,)])
def test_pad_rows_equals_lhotse_collation_then_sort(trailing):
    from lhotse.dataset.collation import collate_matrices, collate_vectors

    rng = np.random.default_rng(0)
    rows = [rng.normal(size=(n, *trailing)).astype(np.float32) for n in (5, 9, 1, 9, 0)]
    order = [1, 3, 0, 2, 4]
    collate = collate_matrices if trailing else collate_vectors
    want = collate(rows, padding_value=-1.0)[torch.tensor(order)]
    got = pad_rows(rows, order, padding_value=-1.0)
    assert got.dtype == want.dtype and torch.equal(got, want)
    assert pad_rows([], [], trailing=(80,)).shape == (0, 0, 80)


@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    from wenet_lhotse.corpus import generate_corpus

    return generate_corpus(tmp_path_factory.mktemp("ring"), num_utterances=16,
                           min_duration=1.0, max_duration=3.0, shard_size=4, seed=5)


@pytest.mark.parametrize("kind", ["raw", "shard"])
def test_loader_batches_with_and_without_the_ring(sharded, kind):
    """The built loader (WeNet's train augmentation, pcm, 2 workers): the same batches
    through the ring as through the DataLoader's own transport."""
    from wenet_lhotse.loader.build import build_dataloader
    from wenet_lhotse.text import CharTokenizer

    conf = {"fbank_conf": {"num_mel_bins": 80, "dither": 0.1}, "speed_perturb": True,
            "spec_aug": True, "batch_conf": {"batch_type": "static", "batch_size": 4},
            "lhotse_conf": {"return_pcm": True}}
    source = sharded.data_list if kind == "raw" else sharded.shards_list
    epochs = []
    for ring in (True, False):
        _, loader = build_dataloader(str(source), CharTokenizer(sharded.units), conf,
                                     "train", num_workers=2, seed=3)
        assert loader.ring is not None
        if not ring:
            loader.ring = loader.dataset.ring = None
        epochs.append(list(loader))
    with_ring, without = epochs
    assert sum(len(b["keys"]) for b in with_ring) == 16
    assert len(with_ring) == len(without)
    for a, b in zip(with_ring, without):
        _same(a, b)
