"""Batches vary between epochs (issue 28): on a corpus of a few hundred utterances, whose
bucket buffer holds it whole, at most a few percent of an epoch's batches hold exactly
the members of a batch of the previous epoch, in map mode (raw list) and indexed mode
(shards with their index), buckets and static batches kept. Before, fixed bucket edges
and one bucket sequence for every epoch repeated 38 % of them (``bench/batch_repetition.py``
measures every mode next to WeNet's own loader)."""

from __future__ import annotations

import pytest

from wenet_lhotse import build_dataloader
from wenet_lhotse.convert.index import index_input
from wenet_lhotse.corpus import generate_corpus
from wenet_lhotse.loader.bins import epoch_bins
from wenet_lhotse.text import CharTokenizer

#: WeNet's train conf (shuffle 1500, sort 500), static batches of 8
CONF = {"shuffle": True, "shuffle_conf": {"shuffle_size": 1500}, "sort": True,
        "sort_conf": {"sort_size": 500}, "batch_conf": {"batch_type": "static", "batch_size": 8}}


class _Keys:
    def __getitem__(self, cuts):
        return {"keys": [c.id for c in cuts]}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    c = generate_corpus(tmp_path_factory.mktemp("rep"), num_utterances=300, min_duration=0.3,
                        max_duration=1.5, shard_size=20, seed=5)
    index_input(str(c.shards_list))
    return c


def _repeats(epochs):
    reps = total = 0
    for prev, cur in zip(epochs, epochs[1:]):
        seen = {frozenset(b) for b in prev}
        reps += sum(frozenset(b) in seen for b in cur)
        total += len(cur)
    return reps, total


@pytest.mark.parametrize("kind", ["raw", "indexed"])
def test_few_batches_repeat_the_previous_epochs(corpus, kind):
    path = corpus.data_list if kind == "raw" else corpus.shards_list
    _, loader = build_dataloader(str(path), CharTokenizer(corpus.units), CONF, "train",
                                 dataset=_Keys(), seed=7)
    assert loader.mode == "map"
    epochs = [[b["keys"] for b in loader] for _ in range(3)]
    for e in epochs:  # every utterance once, WeNet's step count: ceil(300 / 8)
        assert sorted(k for b in e for k in b) == sorted(corpus.keys) and len(e) == 38
    reps, total = _repeats(epochs)
    assert reps <= 0.06 * total, (reps, total)


def test_epoch_bins_move_within_their_neighbours():
    bins = [1.0, 2.0, 3.0, 5.0]
    moved = [epoch_bins(bins, 7, e) for e in range(20)]
    assert moved[0] == epoch_bins(bins, 7, 0)  # a function of seed and epoch
    assert len({tuple(m) for m in moved}) == 20
    for m in moved:
        assert m == sorted(m) and all(abs(a - b) < 0.46 * 2 for a, b in zip(m, bins))
        assert 1.5 < m[1] < 2.5 and 2.5 < m[2] < 4.0  # at most 45 % of the way to a neighbour
    assert epoch_bins([[1, 2], [3, 4]], 7, 1) == [[1, 2], [3, 4]]  # 2D edges kept
