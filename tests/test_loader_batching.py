"""Batches through build_dataloader: DDP ranks never share or repeat a cut (map mode),
streamed resume with equal steps active."""

from __future__ import annotations

import pytest
from lhotse import CutSet

from wenet_lhotse.corpus import generate_corpus
from wenet_lhotse.formats import read_raw_list, write_wenet_shards
from wenet_lhotse.loader.build import build_dataloader


class Keys:
    def __getitem__(self, cuts):
        return [c.id for c in cuts]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("batching")
    corpus = generate_corpus(root / "corpus", num_utterances=41, min_duration=0.5,
                             max_duration=2.5, seed=8)
    cuts = list(read_raw_list(corpus.data_list))
    out = {"cuts": cuts, "root": root}
    for n in (33, 37, 41):
        path = root / f"cuts{n}.jsonl.gz"
        CutSet.from_cuts(cuts[:n]).to_file(path)
        out[n] = path
    out["shards"] = write_wenet_shards(CutSet.from_cuts(cuts), root / "shards", shard_size=4,
                                       list_path=root / "shards.list")
    return out


CONFS = {
    "static4": {"batch_conf": {"batch_type": "static", "batch_size": 4}},
    "dynamic": {"batch_conf": {"batch_type": "dynamic", "max_frames_in_batch": 600}},
    "duration": {"batch_conf": {"batch_type": "static", "batch_size": 4},
                 "lhotse_conf": {"max_duration": 5.0}},
}


@pytest.mark.parametrize("conf", sorted(CONFS))
@pytest.mark.parametrize("n", [33, 37, 41])
@pytest.mark.parametrize("world", [2, 3])
def test_map_ddp_ranks_split_every_cut_once(data, conf, n, world):
    """Each rank builds its own loader (same seed): equal steps, and across ranks every
    utterance exactly once per epoch -- no Lhotse ``_dup`` copies in the last round."""
    ids = sorted(c.id for c in data["cuts"][:n])
    loaders = [build_dataloader(str(data[n]), None, CONFS[conf], "train", dataset=Keys(),
                                seed=5, world_size=world, rank=r)[1] for r in range(world)]
    for _epoch in range(3):
        epochs = [list(loader) for loader in loaders]
        assert len({len(e) for e in epochs}) == 1, [len(e) for e in epochs]
        seen = [k for e in epochs for b in e for k in b]
        assert sorted(seen) == ids
        assert all(b for e in epochs for b in e)  # no empty batch


def test_streamed_resume_with_workers_and_equal_steps(data):
    """Resume a streamed epoch with 2 DataLoader workers while EqualStepsIterator is
    active (steps_per_epoch set): the restored epoch starts at worker 1, so worker 0
    hands in a placeholder first, which must be dropped before the step counting."""
    conf = {"batch_conf": {"batch_type": "static", "batch_size": 3},
            "lhotse_conf": {"mode": "streamed", "steps_per_epoch": 1000}}

    def make():
        return build_dataloader(str(data["shards"]), None, conf, "train", dataset=Keys(),
                                seed=2, num_workers=2)[1]

    expected = list(make())
    loader = make()
    it = iter(loader)
    got = [next(it) for _ in range(3)]  # odd: the next batch comes from worker 1
    sd = loader.state_dict()
    fresh = make()
    fresh.load_state_dict(sd)
    assert got + list(fresh) == expected
