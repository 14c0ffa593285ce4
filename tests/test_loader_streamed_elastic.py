"""A streamed epoch saved mid-way does not resume on another number of ranks (issue 28:
a 2 -> 3 resume after a warning trained 28 keys never and 89 four times): one error line
naming the cause and the fix, from ``load_state_dict`` and from the drop-in's resume."""

from __future__ import annotations

import pytest
import torch

from wenet_lhotse import build_dataloader
from wenet_lhotse.corpus import generate_corpus
from wenet_lhotse.dropin.resume import loader_state_path, restore_loader_state
from wenet_lhotse.errors import WenetDataError
from wenet_lhotse.loader.state_check import StateError
from wenet_lhotse.text import CharTokenizer

CONF = {"batch_conf": {"batch_type": "static", "batch_size": 2},
        "lhotse_conf": {"equal_steps": False}}


class _Keys:
    def __getitem__(self, cuts):
        return {"keys": [c.id for c in cuts]}


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    c = generate_corpus(tmp_path_factory.mktemp("elastic"), num_utterances=24,
                        max_duration=1.2, shard_size=3, seed=2)
    return c


def _loader(c, ws, rank):
    return build_dataloader(str(c.shards_list), CharTokenizer(c.units), CONF, "train",
                            dataset=_Keys(), seed=1, world_size=ws, rank=rank)[1]


def test_streamed_mid_epoch_state_refused_on_another_world_size(shards, tmp_path, monkeypatch):
    loader = _loader(shards, 2, 0)
    it = iter(loader)
    next(it), next(it)
    sd = loader.state_dict()
    assert sd["mode"] == "streamed" and sd["per_worker"]
    with pytest.raises(StateError, match="wenet-lhotse index") as err:
        _loader(shards, 3, 0).load_state_dict(sd)
    assert "2 ranks, this run has 3" in str(err.value) and "\n" not in str(err.value)
    _loader(shards, 2, 0).load_state_dict(sd)  # the same world size resumes
    # the drop-in's resume: rank 2 of 3 has no state of its own; rank 0's is refused
    ckpt = tmp_path / "step_2.pt"
    torch.save(sd, loader_state_path(ckpt, 0))
    monkeypatch.setenv("WORLD_SIZE", "3")
    monkeypatch.setenv("RANK", "2")
    with pytest.raises(WenetDataError, match="index the shards") as err:
        restore_loader_state(_loader(shards, 3, 2), str(ckpt))
    assert "\n" not in str(err.value)
    # an epoch checkpoint (nothing of the epoch consumed) resumes on any number of ranks
    it = iter(loader)
    for _ in it:
        pass
    torch.save(loader.state_dict(), loader_state_path(ckpt, 0))
    assert restore_loader_state(_loader(shards, 3, 2), str(ckpt))
