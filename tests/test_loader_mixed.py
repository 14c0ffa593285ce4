"""loader.mixed / batch_mux / text_sampler: speech, speech-only and text sources mixed by
batch through build_dataloader: one kind per batch, equal steps on 2 ranks, every item
once per epoch, exact resume mid-epoch, shares that follow the weights from the first
batch on a corpus smaller than the buffer, nested groups with temperature."""

from __future__ import annotations

import json
import random
from collections import Counter

import pytest
import torch

from wenet_lhotse import CharTokenizer
from wenet_lhotse.loader.build import build_dataloader
from wenet_lhotse.loader.mixed import source_shares
from wenet_lhotse.sources.groups import effective_weights, temperature_reweighting


class Keys:
    """A real map-style speech dataset returning the cut ids (no audio decoded)."""

    def __getitem__(self, cuts):
        return {"keys": [c.id for c in cuts],
                "speech": [(c.custom or {}).get("kind", "asr") for c in cuts]}


@pytest.fixture(scope="module")
def mix(corpus, tmp_path_factory):
    root = tmp_path_factory.mktemp("mixed")
    chars = [line.split()[0] for line in corpus.units.read_text(encoding="utf-8").splitlines()
             if not line.startswith("<")]
    rng = random.Random(0)
    text = root / "lm.txt"
    text.write_text("\n".join("".join(rng.choice(chars) for _ in range(rng.randint(2, 30)))
                              for _ in range(61)) + "\n", encoding="utf-8")
    pairs = root / "mt.jsonl"
    pairs.write_text("\n".join(json.dumps({"src": "".join(rng.choice(chars) for _ in range(
        rng.randint(2, 12))), "tgt": "".join(rng.choice(chars) for _ in range(
            rng.randint(2, 12)))}, ensure_ascii=False) for _ in range(23)) + "\n",
        encoding="utf-8")
    unlabelled = root / "speech.list"  # the corpus without transcripts
    unlabelled.write_text("".join(json.dumps({k: v for k, v in json.loads(line).items()
                                              if k != "txt"}) + "\n"
                                  for line in corpus.data_list.read_text().splitlines()))
    keys = [json.loads(line)["key"] for line in corpus.data_list.read_text().splitlines()]
    return {"text": text, "pairs": pairs, "raw": corpus.data_list, "unlabelled": unlabelled,
            "keys": keys, "tok": CharTokenizer(corpus.units), "n_text": 61, "n_pairs": 23}


CONF = {"batch_conf": {"batch_type": "static", "batch_size": 3},
        "lhotse_conf": {"num_buckets": 2, "max_tokens_in_batch": 64}}


def _sources(mix, repeat_text=False):
    return [{"path": str(mix["raw"]), "type": "raw", "weight": 2},
            {"path": str(mix["text"]), "type": "text", "weight": 1, "tags": {"task": "lm"},
             "repeat": repeat_text},
            {"path": str(mix["pairs"]), "type": "text", "weight": 1, "tags": {"task": "mt"}}]


def _loader(mix, rank=0, ws=1, conf=CONF, sources=None, **kw):
    return build_dataloader(sources or _sources(mix), mix["tok"], conf, "train",
                            dataset=Keys(), world_size=ws, rank=rank, seed=5, **kw)[1]


def _summary(batch):
    return (batch["kind"], tuple(batch["keys"]))


def test_two_ranks_equal_steps_every_item_once_one_kind_per_batch(mix):
    ranks = [[_summary(b) for b in _loader(mix, r, 2)] for r in range(2)]
    assert len(ranks[0]) == len(ranks[1]) > 0
    for a, b in zip(*ranks):
        assert a[0] == b[0]  # every rank trains the same kind at each step
    keys = Counter(k for r in ranks for _, ks in r for k in ks)
    assert set(keys.values()) == {1}  # nothing twice
    expected = set(mix["keys"]) | {f"lm.txt:{i}" for i in range(1, mix["n_text"] + 1)} | {
        f"mt.jsonl:{i}" for i in range(1, mix["n_pairs"] + 1)}
    assert set(keys) == expected
    kinds = {k for r in ranks for k, _ in r}
    assert kinds == {"asr", "text", "text_pair"}
    stats = _loader(mix).sampler.sampler.samplers[1].read_stats  # nothing silent
    assert (stats.lines, stats.kept, stats.bad) == (mix["n_text"], mix["n_text"], 0)


def test_text_batches_padded_tokens_and_limit(mix):
    loader = _loader(mix)
    seen = 0
    for batch in loader:
        if batch["kind"] == "asr":
            continue
        t, lens = batch["target"], batch["target_lengths"]
        assert t.dtype == torch.int64 and lens.dtype == torch.int32
        assert lens.tolist() == sorted(lens.tolist(), reverse=True)
        assert t.shape == (len(batch["keys"]), int(lens.max()))
        assert (t[0, :lens[0]] >= 0).all() and (t == -1).sum() == (t.shape[1] - lens).sum()
        width = t.shape[1]
        if batch["kind"] == "text_pair":
            width = max(width, batch["source"].shape[1])
            assert batch["source_lengths"].dtype == torch.int32
            assert set(batch["tasks"]) == {"mt"}
        else:
            assert set(batch["tasks"]) == {"lm"}
        assert width * len(batch["keys"]) <= 64  # max_tokens_in_batch: padded tokens
        seen += 1
    assert seen > 0


@pytest.mark.parametrize("workers", [0, 1])
def test_exact_resume_mid_epoch(mix, workers):
    for rank in (0, 1):
        ref = _loader(mix, rank, 2, num_workers=workers)
        it = iter(ref)
        head = [_summary(next(it)) for _ in range(5)]
        state = ref.state_dict()
        rest = [_summary(b) for b in it]
        nxt = [_summary(b) for b in ref]  # and the next epoch
        fresh = _loader(mix, rank, 2, num_workers=workers)
        fresh.load_state_dict(json.loads(json.dumps(state)))  # plain data
        assert [_summary(b) for b in fresh] == rest
        assert [_summary(b) for b in fresh] == nxt
        assert head and rest


def test_resume_after_a_source_ran_out(mix):
    """A state taken after a source was exhausted (and a repeating one restarted)."""
    sources = _sources(mix, repeat_text=True)
    ref = _loader(mix, sources=sources)
    batches = [_summary(b) for b in ref]
    n = len(batches)
    for cut in (n - 2, n - 1):
        loader = _loader(mix, sources=sources)
        it = iter(loader)
        for _ in range(cut):
            next(it)
        state = loader.state_dict()
        fresh = _loader(mix, sources=sources)
        fresh.load_state_dict(state)
        assert [_summary(b) for b in fresh] == batches[cut:]


def test_repeat_source_repeats_until_the_others_end(mix):
    sources = [{"path": str(mix["raw"]), "type": "raw", "weight": 1},
               {"path": str(mix["pairs"]), "type": "text", "weight": 4, "repeat": True}]
    loader = _loader(mix, sources=sources)
    keys = Counter(k for b in loader for k in b["keys"])
    assert all(keys[k] == 1 for k in mix["keys"])  # speech: once, then the epoch ends
    passes = [keys[f"mt.jsonl:{i}"] for i in range(1, mix["n_pairs"] + 1)]
    assert min(passes) >= 2  # the repeating source went round more than once


def test_resume_anywhere_with_a_repeating_source(mix):
    """Restored at every 3rd batch (and with a DataLoader worker prefetching, from an
    older batch than the last emitted): a repeating source restarted in between."""
    sources = [{"path": str(mix["raw"]), "type": "raw", "weight": 1},
               {"path": str(mix["pairs"]), "type": "text", "weight": 4, "repeat": True}]
    ref = [_summary(b) for b in _loader(mix, sources=sources)]
    assert len(ref) > 20
    for cut in range(1, len(ref), 3):
        loader = _loader(mix, sources=sources, num_workers=1)  # prefetches ahead
        it = iter(loader)
        for _ in range(cut):
            next(it)
        fresh = _loader(mix, sources=sources)
        fresh.load_state_dict(json.loads(json.dumps(loader.state_dict())))
        assert [_summary(b) for b in fresh] == ref[cut:], cut


def test_speech_only_source_gives_batches_without_targets(mix, corpus):
    sources = [{"path": str(mix["raw"]), "type": "raw"},
               {"path": str(mix["unlabelled"]), "type": "raw", "transcripts": False}]
    ds, loader = build_dataloader(sources, mix["tok"], CONF, "train", seed=5)
    kinds = Counter()
    for batch in loader:
        kinds[batch["kind"]] += len(batch["keys"])
        assert batch["feats"].shape[0] == len(batch["keys"])
        if batch["kind"] == "speech":
            assert batch["target"].shape == (len(batch["keys"]), 0)
            assert batch["target_lengths"].tolist() == [0] * len(batch["keys"])
        else:
            assert (batch["target_lengths"] > 0).all()
    assert kinds == {"asr": 20, "speech": 20}


def test_shares_follow_weights_at_batch_level_on_a_corpus_smaller_than_the_buffer(mix):
    """3:1 over 2,000 batches, 20 + 20 utterances, buffer 10,000: the shares of batches
    follow the weights (mixing by cut gives the data's shares here, see below)."""
    conf = {"batch_conf": {"batch_type": "static", "batch_size": 2},
            "lhotse_conf": {"num_buckets": 2, "buffer_size": 10000, "steps_per_epoch": 2000}}
    sources = [{"path": str(mix["raw"]), "type": "raw", "weight": 3, "repeat": True,
                "name": "a"},
               {"path": str(mix["raw"]), "type": "raw", "weight": 1, "repeat": True,
                "name": "b"}]
    loader = _loader(mix, conf=conf, sources=sources)
    assert sum(1 for _ in loader) == 2000
    share = source_shares(loader.sampler.sampler)
    assert share["a"] == pytest.approx(0.75, abs=0.03)


def test_first_batches_follow_weights_by_batch_not_by_cut(mix):
    """Within one finite epoch of two equal sources weighted 3:1, the first 4 of 14
    batches (60 seeds): by batch ~3:1; by cut (CutSet.mux into one sampler whose buffer holds the
    whole corpus) the sampler picks buckets, not sources, so the weights are lost."""
    def first_shares(mix_by):
        conf = {"batch_conf": {"batch_type": "static", "batch_size": 3},
                "lhotse_conf": {"num_buckets": 2, "buffer_size": 10000, "mix_by": mix_by}}
        sources = [{"path": str(mix["raw"]), "type": "raw", "weight": 3,
                    "tags": {"lang": "a"}},
                   {"path": str(mix["raw"]), "type": "raw", "weight": 1,
                    "tags": {"lang": "b"}}]
        got = Counter()
        for seed in range(60):  # deterministic: fixed seeds
            ds = build_dataloader(sources, mix["tok"], conf, "train", seed=seed,
                                  dataset=LangOf())[1]
            for i, batch in enumerate(ds):
                if i < 4:  # a batch counts for the source of most of its cuts
                    got[Counter(batch["langs"]).most_common(1)[0][0]] += 1
        return got["a"] / sum(got.values())

    by_batch, by_cut = first_shares("batch"), first_shares("cut")
    assert by_batch == pytest.approx(0.75, abs=0.05)
    assert by_cut < 0.65


class LangOf:
    def __getitem__(self, cuts):
        return {"keys": [c.id for c in cuts], "langs": [c.custom["lang"] for c in cuts]}


def test_nested_groups_temperature_equals_formula(mix):
    t = 0.5
    sources = [{"group": [{"path": str(mix["raw"]), "type": "raw", "weight": 900},
                          {"path": str(mix["text"]), "type": "text", "weight": 100}],
                "weight": 3, "tags": {"task": "asr"}},
               {"path": str(mix["pairs"]), "type": "text", "weight": 1}]
    w_top = temperature_reweighting([3, 1], t)
    w_in = temperature_reweighting([900, 100], t)
    expected = [w_top[0] * w_in[0], w_top[0] * w_in[1], w_top[1]]
    assert expected[0] == pytest.approx(3 ** t / (3 ** t + 1) * 900 ** t / (900 ** t + 100 ** t))
    assert effective_weights(sources, t) == pytest.approx(expected)
    conf = {**CONF, "lhotse_conf": {**CONF["lhotse_conf"], "reweight_temperature": t}}
    loader = _loader(mix, conf=conf, sources=sources)
    assert loader.sampler.sampler.weights == pytest.approx(expected)
    # per level: T = 0 equalises the top level, T = 1 keeps the inner ratio
    assert effective_weights(sources, [0.0, 1.0]) == pytest.approx([0.45, 0.05, 0.5])
    with pytest.raises(ValueError, match="nest 2 level"):
        effective_weights(sources, [1.0])


def test_mix_by_batch_samples_an_indexed_shard_list_through_its_index(tmp_path, caplog):
    """A shard list with its index, mixed by batch: sampled through the index (audio read
    by offset for emitted batches), not loaded into memory; every utterance once."""
    from wenet_lhotse.convert.index import index_input
    from wenet_lhotse.corpus import generate_corpus

    c = generate_corpus(tmp_path / "c", num_utterances=12, max_duration=1.0, shard_size=4,
                        seed=3)
    m = generate_corpus(tmp_path / "m", num_utterances=5, max_duration=1.0, seed=4,
                        prefix="m-")
    index_input(str(c.shards_list))
    conf = {"batch_conf": {"batch_type": "static", "batch_size": 3},
            "fbank_conf": {"num_mel_bins": 20}, "lhotse_conf": {"mix_by": "batch"}}
    with caplog.at_level("WARNING"):
        _, loader = build_dataloader([str(c.shards_list), str(m.data_list)],
                                     CharTokenizer(c.units), conf, "train", seed=2)
        keys = [k for b in loader for k in b["keys"]]
    assert sorted(keys) == sorted(c.keys + m.keys)
    assert not any("loaded into memory" in r.getMessage() for r in caplog.records)


def test_text_state_mid_epoch_refused_on_another_world_size(mix):
    """A text source's position is per rank of a plan dealt by the world size: a state
    saved mid-epoch on 2 ranks is refused on 3 (one line naming the key); an epoch's start
    resumes on any number of ranks."""
    from wenet_lhotse.sources.state_lines import StateError

    loader = _loader(mix, 0, 2)
    it = iter(loader)
    next(it), next(it)
    state = json.loads(json.dumps(loader.state_dict()))
    fresh = _loader(mix, 0, 3)
    with pytest.raises(StateError, match="world_size: saved mid-epoch on 2 ranks") as err:
        fresh.load_state_dict(state)
    assert "\n" not in str(err.value)
    _loader(mix, 1, 2).load_state_dict(state)  # the same world size resumes
    for _ in it:
        pass
    _loader(mix, 2, 3).load_state_dict(loader.state_dict())  # the epoch's end: any size
