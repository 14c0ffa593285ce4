"""WenetAsrDataset: WeNet's batch contract, field by field, on the real corpus audio."""

from __future__ import annotations

import json
from typing import List, Optional

import numpy as np
import pytest
import torch
from lhotse import CutSet, Fbank, FbankConfig
from lhotse.dataset import SimpleCutSampler
from lhotse.dataset.collation import collate_matrices, collate_vectors
from lhotse.utils import fastcopy

from wenet_lhotse.dataset import WenetAsrDataset
from wenet_lhotse.dataset.asr import _match_kept
from wenet_lhotse.errors import WenetDataError
from wenet_lhotse.features.fbank import WenetFbank, WenetFbankConfig
from wenet_lhotse.features.strategy import PooledFeatures
from wenet_lhotse.formats.raw_list import read_raw_list
from wenet_lhotse.text import CharTokenizer


class LhotseFbankInput:
    """A real input strategy with the call signature of ``features.PooledFeatures``:
    Lhotse's own ``Fbank`` on the real audio; ``augment=True`` turns dither on."""

    def __init__(self, return_audio: bool = False, fault_tolerant: bool = False):
        self.return_audio = return_audio
        self.fault_tolerant = fault_tolerant
        self.plain = Fbank(FbankConfig(num_filters=80, dither=0.0))
        self.dithered = Fbank(FbankConfig(num_filters=80, dither=1e-3))
        self.augment_flags: List[bool] = []
        self.epoch: Optional[int] = None

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __call__(self, cuts: CutSet, augment: bool):
        self.augment_flags.append(augment)
        extractor = self.dithered if augment else self.plain
        feats, audios, kept = [], [], []
        for cut in cuts:
            try:
                audio = cut.load_audio()
            except Exception:
                if not self.fault_tolerant:
                    raise
                continue
            feats.append(torch.as_tensor(extractor.extract(audio, cut.sampling_rate)))
            audios.append(torch.as_tensor(audio[0]))
            kept.append(cut)
        lens = torch.tensor([f.shape[0] for f in feats], dtype=torch.int32)
        out = collate_matrices(feats, padding_value=0.0)
        audio_out = None
        if self.return_audio:
            audio_out = (collate_vectors(audios, padding_value=0.0),
                         torch.tensor([a.shape[0] for a in audios], dtype=torch.int32))
        return out, lens, CutSet.from_cuts(kept), audio_out


@pytest.fixture(scope="module")
def cuts(corpus_cuts):
    return corpus_cuts


@pytest.fixture(scope="module")
def texts(corpus):
    lines = corpus.data_list.read_text(encoding="utf-8").splitlines()
    return {json.loads(ln)["key"]: json.loads(ln)["txt"] for ln in lines}


@pytest.fixture(scope="module")
def tok(corpus):
    return CharTokenizer(corpus.units)


def batch_of(cuts, n=6):
    # sampler order deliberately not sorted by length
    return CutSet.from_cuts(list(cuts)[:n])


def test_batch_contract_field_by_field(cuts, tok, texts):
    feats_in = LhotseFbankInput()
    ds = WenetAsrDataset(tok, feats_in, split="cv")
    batch_cuts = batch_of(cuts)
    b = ds[batch_cuts]
    B = len(batch_cuts)
    assert set(b) == {"keys", "feats", "feats_lengths", "target", "target_lengths",
                      "langs", "tasks", "speaker"}
    # keys: every cut once, ordered by feature length, longest first
    assert sorted(b["keys"]) == sorted(c.id for c in batch_cuts)
    by_id = {c.id: c for c in batch_cuts}
    durations = [by_id[k].duration for k in b["keys"]]
    assert durations == sorted(durations, reverse=True)
    assert b["keys"] != [c.id for c in batch_cuts]  # the batch really was reordered
    # feats / feats_lengths
    assert b["feats"].dtype == torch.float32 and b["feats_lengths"].dtype == torch.int32
    lens = b["feats_lengths"].tolist()
    assert lens == sorted(lens, reverse=True)
    assert b["feats"].shape == (B, lens[0], 80)
    for i, k in enumerate(b["keys"]):
        single = feats_in.plain.extract(by_id[k].load_audio(), 16000)
        assert lens[i] == single.shape[0]
        np.testing.assert_array_equal(b["feats"][i, :lens[i]].numpy(), single)
        assert torch.all(b["feats"][i, lens[i]:] == 0.0)
    # target / target_lengths: token ids of the transcript, padded with -1
    assert b["target"].dtype == torch.int64 and b["target_lengths"].dtype == torch.int32
    tl = b["target_lengths"].tolist()
    assert b["target"].shape == (B, max(tl))
    for i, k in enumerate(b["keys"]):
        ids = tok.tokenize(texts[k])[1]
        assert tl[i] == len(ids) > 0
        assert b["target"][i, :tl[i]].tolist() == ids
        assert torch.all(b["target"][i, tl[i]:] == -1)
    assert (b["target"] == -1).any()  # some padding exists in this batch
    # langs / tasks defaults, speaker strings in batch order
    assert b["langs"] == ["zh"] * B and b["tasks"] == ["transcribe"] * B
    assert b["speaker"] == [by_id[k].supervisions[0].speaker for k in b["keys"]]
    assert feats_in.augment_flags == [False]


def test_pcm(cuts, tok):
    ds = WenetAsrDataset(tok, LhotseFbankInput(return_audio=True), split="cv", return_pcm=True)
    batch_cuts = batch_of(cuts, 4)
    b = ds[batch_cuts]
    by_id = {c.id: c for c in batch_cuts}
    assert b["pcm"].dtype == torch.float32 and b["pcm_length"].dtype == torch.int32
    pl = b["pcm_length"].tolist()
    assert pl == [by_id[k].num_samples for k in b["keys"]]
    assert b["pcm"].shape == (4, max(pl))
    for i, k in enumerate(b["keys"]):
        np.testing.assert_array_equal(b["pcm"][i, :pl[i]].numpy(), by_id[k].load_audio()[0])
        assert torch.all(b["pcm"][i, pl[i]:] == 0.0)
    with pytest.raises(ValueError, match="return_audio"):
        WenetAsrDataset(tok, LhotseFbankInput(return_audio=False), return_pcm=True)


def test_train_augments_cv_and_infer_do_not(cuts, tok):
    feats_in = LhotseFbankInput()
    batch_cuts = batch_of(cuts, 3)
    cv = WenetAsrDataset(tok, feats_in, split="cv")
    a, b = cv[batch_cuts], cv[batch_cuts]
    assert torch.equal(a["feats"], b["feats"])
    train = WenetAsrDataset(tok, feats_in, split="train")
    c, d = train[batch_cuts], train[batch_cuts]
    assert not torch.equal(c["feats"], d["feats"])  # dithered
    assert c["keys"] == a["keys"] and torch.equal(c["target"], a["target"])
    infer = WenetAsrDataset(tok, feats_in, split="infer")
    infer[batch_cuts]
    assert feats_in.augment_flags == [False, False, True, True, False]
    train.set_epoch(3)
    assert feats_in.epoch == 3


def test_infer_without_text(cuts, tok):
    unlabeled = CutSet.from_cuts(fastcopy(c, supervisions=[]) for c in batch_of(cuts, 5))
    for tokenizer in (tok, None):
        b = WenetAsrDataset(tokenizer, LhotseFbankInput(), split="infer")[unlabeled]
        assert len(b["keys"]) == 5 and b["feats"].shape[0] == 5
        assert b["target"].shape == (5, 0) and b["target"].dtype == torch.int64
        assert b["target_lengths"].tolist() == [0] * 5
        assert b["target_lengths"].dtype == torch.int32
        assert "speaker" not in b
    # a mixed batch: labeled cuts keep their targets, unlabeled ones get length 0
    mixed = list(batch_of(cuts, 4))
    mixed[1] = fastcopy(mixed[1], supervisions=[])
    b = WenetAsrDataset(tok, LhotseFbankInput(), split="infer")[CutSet.from_cuts(mixed)]
    lengths = dict(zip(b["keys"], b["target_lengths"].tolist()))
    assert lengths[mixed[1].id] == 0
    assert all(lengths[c.id] > 0 for i, c in enumerate(mixed) if i != 1)
    with pytest.raises(ValueError, match="tokenizer"):
        WenetAsrDataset(None, LhotseFbankInput(), split="train")


def test_missing_text_errors_name_the_cut(cuts, tok):
    batch = list(batch_of(cuts, 3))
    bad = fastcopy(batch[2], supervisions=[])
    ds = WenetAsrDataset(tok, LhotseFbankInput(), split="train")
    with pytest.raises(WenetDataError, match=bad.id) as err:
        ds[CutSet.from_cuts(batch[:2] + [bad])]
    assert err.value.kind == "missing_text"
    assert str(err.value).startswith(bad.recording.sources[0].source)
    none_text = fastcopy(batch[2], supervisions=[fastcopy(batch[2].supervisions[0], text=None)])
    with pytest.raises(WenetDataError, match="no transcript"):
        ds[CutSet.from_cuts([none_text])]
    two = fastcopy(batch[1], supervisions=batch[1].supervisions * 2)
    with pytest.raises(WenetDataError, match="2 supervisions"):
        ds[CutSet.from_cuts([two])]
    # fault tolerant: skipped, logged, counted; the rest of the batch is intact
    ft = WenetAsrDataset(tok, LhotseFbankInput(), split="train", fault_tolerant=True)
    b = ft[CutSet.from_cuts(batch[:2] + [bad])]
    assert sorted(b["keys"]) == sorted(c.id for c in batch[:2])
    assert len(ft.skip_report) == 1 and ft.skip_report.counts()["missing_text"] == 1
    # every cut skipped: an empty batch, not a crash
    b = ft[CutSet.from_cuts([bad])]
    assert b["keys"] == [] and b["feats"].shape[0] == 0 and b["target"].shape[0] == 0


def test_features_dropping_a_cut(cuts, tok, tmp_path):
    batch = list(batch_of(cuts, 4))
    src = batch[1].recording.sources[0]
    broken = fastcopy(batch[1], recording=fastcopy(
        batch[1].recording, sources=[fastcopy(src, source=str(tmp_path / "gone.wav"))]))
    batch[1] = broken
    b = WenetAsrDataset(tok, LhotseFbankInput(fault_tolerant=True), split="cv")[
        CutSet.from_cuts(batch)]
    assert len(b["keys"]) == 3 and broken.id not in b["keys"]
    assert b["feats"].shape[0] == b["target"].shape[0] == len(b["speaker"]) == 3


def test_tags_language_and_speaker_table(cuts, tok):
    batch = list(batch_of(cuts, 3))
    batch[0] = batch[0].with_custom("lang", "en").with_custom("task", "translate")
    sup = fastcopy(batch[1].supervisions[0], language="fr")
    batch[1] = fastcopy(batch[1], supervisions=[sup])
    table = {batch[0].supervisions[0].speaker: 5}
    ds = WenetAsrDataset(tok, LhotseFbankInput(), split="cv", lang_default="xx",
                         speaker_table=table)
    b = ds[CutSet.from_cuts(batch)]
    row = {k: i for i, k in enumerate(b["keys"])}
    assert b["langs"][row[batch[0].id]] == "en" and b["tasks"][row[batch[0].id]] == "translate"
    assert b["langs"][row[batch[1].id]] == "fr" and b["tasks"][row[batch[1].id]] == "transcribe"
    assert b["langs"][row[batch[2].id]] == "xx"
    assert b["speaker"].dtype == torch.int32
    expected = [5 if by == batch[0].supervisions[0].speaker else 0
                for by in (next(c for c in batch if c.id == k).supervisions[0].speaker
                           for k in b["keys"])]
    assert b["speaker"].tolist() == expected


def test_match_kept_handles_duplicates_and_suffixes(cuts):
    a, b, c = list(batch_of(cuts, 3))
    inputs = [a, b, a, c]
    assert _match_kept(inputs, [a, a, c]) == [0, 2, 3]
    assert _match_kept(inputs, [b.with_id(b.id + "_sp0.9"), c]) == [1, 3]
    with pytest.raises(RuntimeError, match="not in the batch"):
        _match_kept([a, b], [c])


def test_with_dataloader_and_sampler(cuts, tok):
    ds = WenetAsrDataset(tok, LhotseFbankInput(), split="cv")
    sampler = SimpleCutSampler(cuts, max_duration=10.0, shuffle=False)
    loader = torch.utils.data.DataLoader(ds, sampler=sampler, batch_size=None, num_workers=1)
    seen = []
    for b in loader:
        assert b["feats"].shape[0] == len(b["keys"]) == b["target"].shape[0]
        seen.extend(b["keys"])
    assert sorted(seen) == sorted(c.id for c in cuts)


def test_cuts_from_wenet_raw_list(corpus, tok, texts):
    """The formats reader's cut layout (text, speaker, language, custom extras) -> batch."""
    lines = corpus.data_list.read_text(encoding="utf-8").splitlines()[:4]
    items = [json.loads(ln) for ln in lines]
    items[0]["lang"] = "en"
    items[1]["task"] = "translate"
    path = corpus.root / "tagged.list"
    path.write_text("".join(json.dumps(it) + "\n" for it in items), encoding="utf-8")
    cuts = read_raw_list(path)
    b = WenetAsrDataset(tok, LhotseFbankInput(), split="cv")[cuts]
    row = {k: i for i, k in enumerate(b["keys"])}
    assert sorted(b["keys"]) == sorted(it["key"] for it in items)
    assert b["langs"][row[items[0]["key"]]] == "en"
    assert b["tasks"][row[items[1]["key"]]] == "translate"
    assert b["tasks"][row[items[0]["key"]]] == "transcribe"
    for i, k in enumerate(b["keys"]):
        assert b["target"][i, : b["target_lengths"][i]].tolist() == tok.tokenize(texts[k])[1]
        assert b["speaker"][i] == next(it["speaker"] for it in items if it["key"] == k)


def test_lang_auto(cuts, tok):
    batch = list(batch_of(cuts, 3))
    sup = fastcopy(batch[0].supervisions[0], text="ab 你好")
    batch[0] = fastcopy(batch[0], supervisions=[sup])
    batch[2] = fastcopy(batch[2], supervisions=[])
    ds = WenetAsrDataset(tok, LhotseFbankInput(), split="infer", lang_default="auto")
    b = ds[CutSet.from_cuts(batch)]
    langs = dict(zip(b["keys"], b["langs"]))
    assert langs == {batch[0].id: "zh", batch[1].id: "en", batch[2].id: "zh"}


def test_with_pooled_features(cuts, tok, texts):
    """The package's own input strategy (WeNet fbank, dither, spec_aug, a worker pool)."""
    extractor = WenetFbank(WenetFbankConfig(num_mel_bins=80, dither=0.1))
    batch_cuts = batch_of(cuts, 5)
    by_id = {c.id: c for c in batch_cuts}
    with PooledFeatures(extractor, num_workers=1, spec_aug=True, seed=3,
                             return_audio=True) as feats:
        train = WenetAsrDataset(tok, feats, split="train", return_pcm=True)
        cv = WenetAsrDataset(tok, feats, split="cv", return_pcm=True)
        c1, c2 = cv[batch_cuts], cv[batch_cuts]
        t0 = train[batch_cuts]
        train.set_epoch(1)
        t1 = train[batch_cuts]
    assert torch.equal(c1["feats"], c2["feats"])  # cv: no dither, no spec_aug
    assert not torch.equal(t0["feats"], c1["feats"])
    assert not torch.equal(t0["feats"], t1["feats"])  # new epoch, new augmentation
    for b in (c1, t0, t1):
        assert b["feats"].dtype == torch.float32 and b["feats"].shape[2] == 80
        lens = b["feats_lengths"].tolist()
        assert lens == sorted(lens, reverse=True) and b["feats"].shape[1] == lens[0]
        assert b["feats_lengths"].dtype == torch.int32
        for i, k in enumerate(b["keys"]):
            # snip_edges=True (WeNet): 1 + (samples - 400) // 160 frames
            assert lens[i] == 1 + (by_id[k].num_samples - 400) // 160
            assert torch.all(b["feats"][i, lens[i]:] == 0.0)
            tl = int(b["target_lengths"][i])
            assert b["target"][i, :tl].tolist() == tok.tokenize(texts[k])[1]
            assert torch.all(b["target"][i, tl:] == -1)
        assert b["pcm_length"].tolist() == [by_id[k].num_samples for k in b["keys"]]
    np.testing.assert_allclose(c1["pcm"][0, : c1["pcm_length"][0]].numpy(),
                               by_id[c1["keys"][0]].load_audio()[0], atol=1e-6)


def test_langid_with_different_language_sets_answers_as_a_fresh_identifier():
    """WenetLangId sets langid's languages only when they change (WeNet sets them for
    every utterance); interleaved identifiers with different sets still answer as
    langid does with its languages set just before the call."""
    from langid.langid import LanguageIdentifier, model

    from wenet_lhotse.dataset.langid import WenetLangId

    texts = ["今天天气很好", "the weather is fine today", "c'est la vie mon ami",
             "guten Morgen zusammen", "你好 hello"]
    ids = [WenetLangId(["zh", "en"]), WenetLangId(None), WenetLangId(["fr", "de"]),
           WenetLangId(["zh", "en"])]
    fresh = LanguageIdentifier.from_modelstring(model, norm_probs=True)
    for text in texts:
        for ident in ids:
            fresh.set_languages(ident.limited_langs)
            assert ident(text) == fresh.classify(text)[0], (text, ident.limited_langs)


def test_langid_label_without_normalizing_is_classifys():
    """The label taken from the unnormalized log-probabilities (a clear best class) is
    ``classify``'s on varied texts (real langid, two language sets)."""
    import random

    from langid.langid import LanguageIdentifier, model

    from wenet_lhotse.dataset import langid as lang_mod

    rng = random.Random(0)
    alphabet = "abcdefghijklmnopqrstuvwxyz  你好世界中文识别语音テストпривет123!"
    texts = ["", " ", "a", "你", "1"] + ["".join(rng.choice(alphabet)
                                          for _ in range(rng.randint(1, 30)))
                                          for _ in range(300)]
    lid = LanguageIdentifier.from_modelstring(model, norm_probs=True)
    for langs in (["zh", "en"], ["en", "fr", "de"]):
        lid.set_languages(langs)
        assert [lang_mod._classify(lid, t) for t in texts] == [lid.classify(t)[0]
                                                               for t in texts]

