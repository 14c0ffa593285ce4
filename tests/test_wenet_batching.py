"""Batching against WeNet's own ``wenet.dataset.dataset.Dataset`` (from ``$WENET_ROOT``) on
the same generated corpus and ``dataset_conf``: static steps per epoch equal WeNet's (one
process and 2 ranks), dynamic batches never over ``max_frames_in_batch`` with speed
perturbation, bucket batches within WeNet's bucket sizes."""

from __future__ import annotations

import math

import pytest
from torch.utils.data.graph_settings import apply_sharding

from wenet_harness import import_wenet, wenet_char_tokenizer
from wenet_harness.runs import speaker_table
from wenet_lhotse.corpus import generate_corpus
from wenet_lhotse.loader.build import build_dataloader
from wenet_lhotse.text import CharTokenizer

N = 96


@pytest.fixture(scope="module")
def setup(wenet_root, tmp_path_factory):
    root = tmp_path_factory.mktemp("wenet_batching")
    corpus = generate_corpus(root / "corpus", num_utterances=N, min_duration=0.4,
                             max_duration=2.4, seed=21)
    spk = speaker_table(corpus.data_list, root / "spk.txt")
    (dataset_mod,) = import_wenet("wenet.dataset.dataset")
    wenet_tok = wenet_char_tokenizer(corpus.units)
    base = {"fbank_conf": {"num_mel_bins": 40, "frame_length": 25, "frame_shift": 10,
                           "dither": 0.1},
            "spec_aug": False, "shuffle": True, "shuffle_conf": {"shuffle_size": 100},
            "sort": True, "sort_conf": {"sort_size": 50},
            "speaker_conf": {"speaker_table_path": str(spk)}}
    return {"corpus": corpus, "dataset": dataset_mod, "wenet_tok": wenet_tok, "base": base,
            "tok": CharTokenizer(corpus.units)}


def _wenet(setup, conf, world=1, rank=0):
    ds = setup["dataset"].Dataset("raw", str(setup["corpus"].data_list), setup["wenet_tok"],
                                  conf, partition=True)
    if world > 1:  # what WeNet's DataLoader does for rank `rank` (one worker)
        apply_sharding(ds, world, rank)
    return list(ds)


class Keys:
    def __getitem__(self, cuts):
        return [c.id for c in cuts]


def _ours(setup, conf, world=1, rank=0, epochs=1, dataset=None):
    _, loader = build_dataloader(str(setup["corpus"].data_list), setup["tok"], conf, "train",
                                 seed=3, world_size=world, rank=rank,
                                 dataset=dataset if dataset is not None else Keys())
    return [list(loader) for _ in range(epochs)]


@pytest.mark.parametrize("batch_size,world", [(8, 1), (16, 1), (8, 2)])
def test_static_steps_per_epoch_equal_wenets(setup, batch_size, world):
    conf = {**setup["base"], "batch_conf": {"batch_type": "static", "batch_size": batch_size}}
    for rank in range(world):
        wenet = _wenet(setup, conf, world, rank)
        assert math.ceil(sum(len(b["keys"]) for b in wenet) / batch_size) == len(wenet)
        for epoch in _ours(setup, conf, world, rank, epochs=2):
            assert abs(len(epoch) - len(wenet)) <= 0.01 * len(wenet), (len(epoch), len(wenet))
            sizes = [len(b) for b in epoch]
            assert sizes[:-1] == [batch_size] * (len(sizes) - 1)  # only the last is smaller


def test_static_under_2_ranks_uses_every_utterance_once(setup):
    conf = {**setup["base"], "batch_conf": {"batch_type": "static", "batch_size": 16}}
    epochs = [_ours(setup, conf, 2, r)[0] for r in range(2)]
    keys = [k for e in epochs for b in e for k in b]
    assert sorted(keys) == sorted(setup["corpus"].keys)
    assert len(epochs[0]) == len(epochs[1]) == math.ceil(N / 2 / 16)


def test_dynamic_never_over_max_frames_with_speed_perturb(setup):
    """On the real batches (features computed): feats.shape[0] * feats.shape[1] <= cap,
    also where WeNet's own loader stays under it."""
    cap = 1200
    conf = {**setup["base"], "speed_perturb": True,
            "batch_conf": {"batch_type": "dynamic", "max_frames_in_batch": cap}}
    wenet = _wenet(setup, conf)
    assert max(b["feats"].shape[0] * b["feats"].shape[1] for b in wenet) <= cap
    from wenet_lhotse.loader.build import make_wenet_dataset

    ours = _ours(setup, conf, epochs=2,
                 dataset=make_wenet_dataset(setup["tok"], conf, "train", seed=3))
    for epoch in ours:
        padded = [b["feats"].shape[0] * b["feats"].shape[1] for b in epoch]
        assert max(padded) <= cap
        assert sum(b["feats"].shape[0] for b in epoch) == N
        assert sum(padded) / len(padded) > 0.6 * cap  # batches are filled
    # WeNet's step count, for the record (not a promise): within a factor of 1.5
    assert 1 / 1.5 < len(ours[0]) / len(wenet) < 1.5


def test_bucket_sizes_are_wenets(setup):
    bounds, sizes = [100, 160, 200], [12, 8, 6, 4]
    conf = {**setup["base"], "speed_perturb": True,
            "batch_conf": {"batch_type": "bucket", "bucket_boundaries": bounds,
                           "bucket_batch_sizes": sizes}}
    from bisect import bisect_right

    from wenet_lhotse.loader.build import make_wenet_dataset

    def limit(frames):
        return sizes[bisect_right(bounds, frames)]  # WeNet: first boundary > length

    wenet = _wenet(setup, conf)
    assert all(len(b["keys"]) <= limit(b["feats"].shape[1]) for b in wenet)
    ours = _ours(setup, conf, dataset=make_wenet_dataset(setup["tok"], conf, "train",
                                                         seed=3))[0]
    assert all(b["feats"].shape[0] <= limit(b["feats"].shape[1]) for b in ours)
    assert sum(b["feats"].shape[0] for b in ours) == N
    assert len(ours) <= len(wenet)  # remainders merged, never more steps than WeNet


@pytest.mark.parametrize("workers,batch_size", [(2, 10), (3, 10)])
def test_static_steps_equal_wenets_with_dataloader_workers(setup, workers, batch_size):
    """WeNet's DataLoader splits the lines over its workers and each batches its own
    share (a partial batch per worker): with 96 utterances, batches of 10 and 3 workers
    it takes 3 x ceil(32 / 10) = 12 steps, not ceil(96 / 10) = 10. The same DataLoader
    worker count gives ours the same count, every epoch, every utterance once."""
    import torch

    conf = {**setup["base"], "batch_conf": {"batch_type": "static", "batch_size": batch_size}}
    ds = setup["dataset"].Dataset("raw", str(setup["corpus"].data_list), setup["wenet_tok"],
                                  conf, partition=True)
    wenet = sum(1 for _ in torch.utils.data.DataLoader(ds, batch_size=None,
                                                       num_workers=workers))
    assert wenet == workers * math.ceil(N / workers / batch_size)
    _, loader = build_dataloader(str(setup["corpus"].data_list), setup["tok"], conf, "train",
                                 seed=3, dataset=Keys(), num_workers=workers)
    for _ in range(2):
        epoch = list(loader)
        assert len(epoch) == wenet
        assert sorted(k for b in epoch for k in b) == sorted(setup["corpus"].keys)
        assert max(len(b) for b in epoch) == batch_size


def test_wenet_static_steps_split_lines_over_ranks_and_workers():
    from wenet_lhotse.loader.distributed import wenet_static_steps

    def brute(n, ws, nw, b, rank):  # line i goes to instance i % (ws * nw)
        inst = [sum(1 for i in range(n) if i % (ws * nw) == rank * nw + w) for w in range(nw)]
        return sum(math.ceil(k / b) for k in inst)

    for n, ws, nw, b in [(96, 1, 3, 10), (218, 2, 2, 4), (100, 3, 2, 8), (7, 2, 2, 4)]:
        assert wenet_static_steps(n, ws, nw, b) == max(brute(n, ws, nw, b, r) for r in range(ws))


def test_workers_step_count_resumes_exactly_in_the_split_tail(setup):
    """A state saved in the epoch's tail (where batches were split to WeNet's count)
    continues with exactly the batches of the uninterrupted run."""
    conf = {**setup["base"], "batch_conf": {"batch_type": "static", "batch_size": 10}}

    def make():
        return build_dataloader(str(setup["corpus"].data_list), setup["tok"], conf, "train",
                                seed=3, dataset=Keys(), num_workers=3)[1]

    full = list(make())
    assert len(full) == 12
    for at in (8, 10, 11):
        loader = make()
        it = iter(loader)
        first = [next(it) for _ in range(at)]
        state = loader.state_dict()
        del it
        again = make()
        again.load_state_dict(state)
        assert first + list(again) == full, at
