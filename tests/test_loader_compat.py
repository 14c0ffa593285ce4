"""The train.py drop-in: WeNet's signature, return value and side effect, with a tokenizer
object that is not ours, on real audio through the real dataset and features."""

from __future__ import annotations

import copy
import inspect
from types import SimpleNamespace

import pytest
import torch

from wenet_lhotse.cli.bench_cmd import AISHELL_DATASET_CONF
from wenet_lhotse.dropin.compat import init_dataset_and_dataloader
from wenet_lhotse.formats import read_raw_list, write_wenet_shards


class WenetStyleCharTokenizer:
    """Duck-typed like WeNet's CharTokenizer: tokenize(line) -> (tokens, ids), vocab_size()."""

    def __init__(self, units_path):
        self.table = {}
        for line in open(units_path, encoding="utf-8"):
            tok, idx = line.split()
            self.table[tok] = int(idx)

    def tokenize(self, line):
        tokens = ["▁" if ch == " " else ch for ch in line.strip()]
        return tokens, [self.table.get(t, self.table["<unk>"]) for t in tokens]

    def vocab_size(self):
        return len(self.table)


# WeNet's aishell dataset_conf (the bench command's default), with small static batches
DATASET_CONF = {**AISHELL_DATASET_CONF, "batch_conf": {"batch_type": "static", "batch_size": 4}}


def _args(train, cv, data_type, num_workers=0):
    return SimpleNamespace(train_data=str(train), cv_data=str(cv), data_type=data_type,
                           num_workers=num_workers, pin_memory=False, prefetch=2)


def test_signature_matches_wenet():
    params = list(inspect.signature(init_dataset_and_dataloader).parameters.values())
    assert [p.name for p in params] == ["args", "configs", "tokenizer", "seed"]
    assert params[3].default == 777


def _check_batch(batch, tokenizer, texts, feat_dim=80):
    assert set(batch) >= {"keys", "feats", "feats_lengths", "target", "target_lengths",
                          "langs", "tasks"}
    b = len(batch["keys"])
    assert batch["feats"].dtype == torch.float32 and batch["feats"].shape[0] == b
    assert batch["feats"].shape[2] == feat_dim
    assert batch["feats_lengths"].dtype == torch.int32
    assert batch["target"].dtype == torch.int64 and batch["target_lengths"].dtype == torch.int32
    lens = batch["feats_lengths"].tolist()
    assert lens == sorted(lens, reverse=True)
    for i, key in enumerate(batch["keys"]):
        ids = tokenizer.tokenize(texts[key])[1]
        n = int(batch["target_lengths"][i])
        assert batch["target"][i, :n].tolist() == ids
        assert (batch["target"][i, n:] == -1).all()


@pytest.mark.parametrize("data_type", ["raw", "shard"])
def test_drop_in_trains_and_validates(corpus, tmp_path, data_type):
    tokenizer = WenetStyleCharTokenizer(corpus.units)
    texts = {c.id: c.supervisions[0].text for c in read_raw_list(corpus.data_list)}
    train = corpus.data_list
    if data_type == "shard":
        train = write_wenet_shards(read_raw_list(corpus.data_list), tmp_path / "shards",
                                   shard_size=5, list_path=tmp_path / "shards.list")
    configs = {"dataset_conf": copy.deepcopy(DATASET_CONF)}
    out = init_dataset_and_dataloader(_args(train, train, data_type, 1), configs, tokenizer)
    assert len(out) == 4
    train_ds, cv_ds, train_dl, cv_dl = out
    assert configs["vocab_size"] == tokenizer.vocab_size()
    for _epoch in range(2):
        keys = []
        for batch in train_dl:
            _check_batch(batch, tokenizer, texts)
            keys += batch["keys"]
        assert sorted(keys) == sorted(texts)  # every utterance, once per epoch
    cv_keys, cv_feats = [], []
    for batch in cv_dl:
        _check_batch(batch, tokenizer, texts)
        cv_keys += batch["keys"]
        cv_feats.append(batch["feats"])
    assert sorted(cv_keys) == sorted(texts)
    # cv keeps the yaml's dither (0.1 in aishell's conf), as WeNet's: new noise each pass
    again = [b["feats"] for b in cv_dl]
    assert not all(torch.equal(a, b) for a, b in zip(cv_feats, again))


def test_sources_and_tags_from_yaml(corpus, tmp_path):
    tokenizer = WenetStyleCharTokenizer(corpus.units)
    conf = copy.deepcopy(DATASET_CONF)
    conf["lhotse_conf"] = {
        "sources": [{"path": str(corpus.data_list), "type": "raw", "weight": 1,
                     "tags": {"lang": "xx", "task": "transcribe"}}],
        "max_duration": 12.0,
    }
    configs = {"dataset_conf": conf}
    _, _, train_dl, cv_dl = init_dataset_and_dataloader(
        _args("unused", corpus.data_list, "raw"), configs, tokenizer, seed=3)
    batches = list(train_dl)
    assert {lang for b in batches for lang in b["langs"]} == {"xx"}
    assert {t for b in batches for t in b["tasks"]} == {"transcribe"}
    for b in batches:  # the duration budget holds for padded audio
        assert len(b["keys"]) * float(b["feats_lengths"].max()) / 100 <= 12.0 * 1.1 + 0.5


def test_rejects_tokenizer_without_wenet_interface(corpus):
    with pytest.raises(TypeError, match="tokenize"):
        init_dataset_and_dataloader(_args(corpus.data_list, corpus.data_list, "raw"),
                                    {"dataset_conf": {}}, object())


def test_resumed_batches_have_identical_features(corpus):
    """Restoring gives the same batches down to the augmented features: dither, spec_aug
    and speed perturbation are seeded by (seed, epoch, cut id)."""
    tokenizer = WenetStyleCharTokenizer(corpus.units)
    args = _args(corpus.data_list, corpus.data_list, "raw")

    def loader():
        return init_dataset_and_dataloader(args, {"dataset_conf": copy.deepcopy(DATASET_CONF)},
                                           tokenizer)[2]

    ref = loader()
    list(ref)  # epoch 0
    expected = list(ref)  # epoch 1
    run = loader()
    list(run)
    it = iter(run)
    next(it), next(it)
    fresh = loader()
    fresh.load_state_dict(run.state_dict())
    got = list(fresh)
    assert [b["keys"] for b in got] == [b["keys"] for b in expected[2:]]
    for a, b in zip(got, expected[2:]):
        assert torch.equal(a["feats"], b["feats"])
    # and the augmentation really is on: epoch 0 and epoch 1 differ for the same utterance
    first = {k: f for b in list(loader()) for k, f in zip(b["keys"], b["feats"])}
    second = {k: f for b in expected for k, f in zip(b["keys"], b["feats"])}
    assert any(not torch.equal(first[k], second[k]) for k in first)
