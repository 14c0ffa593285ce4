"""WeNet's deterministic order (``shuffle``, ``sort``, ``list_shuffle`` off, static batches)
against WeNet's own loader (``wenet.dataset.dataset.Dataset`` from ``$WENET_ROOT``, in
torch's DataLoader as WeNet's train_utils runs it): the same batches, batch for batch, on 1
and 2 ranks, with 0 and 2 DataLoader workers, static and dynamic, some utterances
filtered."""

from __future__ import annotations

import pytest
import torch.utils.data.dataloader as torch_dataloader
from torch.utils.data import DataLoader
from torch.utils.data.graph_settings import apply_sharding

from wenet_harness import import_wenet, wenet_char_tokenizer
from wenet_harness.runs import speaker_table
from wenet_lhotse.corpus import generate_corpus
from wenet_lhotse.loader.build import build_dataloader
from wenet_lhotse.loader.in_order import (
    dynamic_batches,
    plan_in_order,
    static_batches,
    wants_in_order,
    worker_shares,
)
from wenet_lhotse.text import CharTokenizer

N = 45


@pytest.fixture(scope="module")
def setup(wenet_root, tmp_path_factory):
    root = tmp_path_factory.mktemp("in_order")
    corpus = generate_corpus(root / "corpus", num_utterances=N, min_duration=0.4,
                             max_duration=2.4, seed=8)
    spk = speaker_table(corpus.data_list, root / "spk.txt")
    (dataset_mod,) = import_wenet("wenet.dataset.dataset")
    conf = {"fbank_conf": {"num_mel_bins": 20, "frame_length": 25, "frame_shift": 10,
                           "dither": 0.0},
            "filter_conf": {"max_length": 200},  # drops the utterances over 2 s
            "spec_aug": False, "shuffle": False, "sort": False, "list_shuffle": False,
            "speaker_conf": {"speaker_table_path": str(spk)},
            "batch_conf": {"batch_type": "static", "batch_size": 4}}
    return {"corpus": corpus, "dataset": dataset_mod, "conf": conf,
            "wenet_tok": wenet_char_tokenizer(corpus.units), "tok": CharTokenizer(corpus.units)}


def _collate(batch):
    return batch


def _wenet(setup, conf, world, rank, workers, monkeypatch):
    """WeNet's batches (keys) for ``rank``: its Dataset in torch's DataLoader, which shards
    it by (world_size, rank) from torch.distributed and by worker."""
    ds = setup["dataset"].Dataset("raw", str(setup["corpus"].data_list), setup["wenet_tok"],
                                  conf, partition=True)
    # what torch's DataLoader reads from an initialised process group of `world` ranks
    monkeypatch.setattr(torch_dataloader, "_get_distributed_settings", lambda: (world, rank))
    if workers == 0:
        apply_sharding(ds, world, rank)  # what the single-process iterator applies
    loader = DataLoader(ds, batch_size=None, num_workers=workers, collate_fn=_collate)
    return [sorted(b["keys"]) for b in loader]


class Keys:
    def __getitem__(self, cuts):
        return sorted(c.id for c in cuts)


def _ours(setup, conf, world, rank, workers, epochs=2):
    _, loader = build_dataloader(str(setup["corpus"].data_list), setup["tok"], conf,
                                 "train", dataset=Keys(), seed=3, world_size=world, rank=rank,
                                 num_workers=workers)
    return [list(loader) for _ in range(epochs)]


DYNAMIC = {"batch_type": "dynamic", "max_frames_in_batch": 700}


@pytest.mark.parametrize("world,workers,batch_conf", [
    (1, 0, None), (2, 0, None), (2, 2, None), (1, 0, DYNAMIC), (2, 2, DYNAMIC)])
def test_batches_equal_wenets_batch_for_batch(setup, world, workers, batch_conf,
                                              monkeypatch):
    conf = {**setup["conf"], **({"batch_conf": batch_conf} if batch_conf else {})}
    seen = []
    for rank in range(world):
        wenet = _wenet(setup, conf, world, rank, workers, monkeypatch)
        assert 0 < sum(map(len, wenet)) < N  # some filtered
        if batch_conf:
            assert len(set(map(len, wenet))) > 1  # batch sizes vary with the lengths
        for epoch in _ours(setup, conf, world, rank, workers):
            assert epoch == wenet, (world, rank, workers)
        seen += [k for b in wenet for k in b]
    assert len(seen) == len(set(seen))  # every kept utterance on exactly one rank


def test_in_order_only_when_wenet_keeps_the_order():
    base = {"shuffle": False, "sort": False, "list_shuffle": False,
            "batch_conf": {"batch_type": "static", "batch_size": 4}}
    assert wants_in_order(base, "train", 1, False, False, "wenet")
    assert not wants_in_order({**base, "sort": True}, "train", 1, False, False, "wenet")
    assert not wants_in_order({k: v for k, v in base.items() if k != "sort"}, "train", 1,
                              False, False, "wenet")  # WeNet's default sort: true
    assert not wants_in_order(base, "train", 1, True, False, "wenet")
    assert not wants_in_order(base, "train", 2, False, False, "wenet")  # mixed sources
    assert not wants_in_order(base, "train", 1, False, False, "duration")
    dynamic = {**base, "batch_conf": DYNAMIC}
    assert wants_in_order(dynamic, "train", 1, False, False, "wenet")
    # WeNet's speeds are random: no batch-for-batch order to keep
    assert not wants_in_order({**dynamic, "speed_perturb": True}, "train", 1, False, False,
                              "wenet")
    assert not wants_in_order({**base, "batch_conf": {"batch_type": "bucket"}}, "train", 1,
                              False, False, "wenet")


def test_worker_shares_and_round_robin():
    shares = worker_shares(range(20), world_size=2, rank=1, num_workers=2)
    # line i -> instance i % 4 = worker * 2 + rank: rank 1 holds instances 1 and 3
    assert shares == [[1, 5, 9, 13, 17], [3, 7, 11, 15, 19]]
    from lhotse.testing.dummies import dummy_cut

    cuts = [dummy_cut(i) for i in range(13)]
    plan = plan_in_order(cuts, None, static_batches(2), world_size=1, rank=0, num_workers=2)
    ids = [[c.id for c in b] for b in plan]
    w0, w1 = [c.id for c in cuts[0::2]], [c.id for c in cuts[1::2]]
    assert ids == [w0[0:2], w1[0:2], w0[2:4], w1[2:4], w0[4:6], w1[4:6], w0[6:7]]


def test_dynamic_window_is_wenets():
    """WeNet's DynamicBatchWindow: the batch ends before the utterance that would bring
    longest * count over the cap; a single longer utterance still forms a batch."""
    frames = {"a": 50, "b": 60, "c": 40, "d": 200, "e": 30, "f": 30}
    batch = dynamic_batches(150, frames.__getitem__)
    assert batch(list("abcdef")) == [["a", "b"], ["c"], ["d"], ["e", "f"]]
