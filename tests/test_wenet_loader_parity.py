"""WeNet's own ``init_dataset_and_dataloader`` next to ours, on the same arguments built by
WeNet's own argparse (``wenet.bin.train.get_args``) and the same yaml: the cv batches
carry the same utterances with the same features (dither 0), targets, langs, speaker
and pcm."""

from __future__ import annotations

import copy
import json

import pytest
import torch

from wenet_harness import import_wenet
from wenet_harness.runs import speaker_table, write_config
from wenet_lhotse.corpus import generate_corpus


@pytest.fixture(scope="module")
def wenet(wenet_root):
    train_mod, train_utils, init_tokenizer = import_wenet(
        "wenet.bin.train", "wenet.utils.train_utils", "wenet.utils.init_tokenizer")
    return train_mod, train_utils, init_tokenizer


@pytest.fixture(scope="module")
def data(tmp_path_factory, wenet_root):
    root = tmp_path_factory.mktemp("parity")
    corpus = generate_corpus(root / "corpus", num_utterances=24, min_duration=0.5,
                             max_duration=2.0, seed=11)
    # English and Chinese lines, so that WeNet's langid (limited to zh/en) has work to do
    lines = corpus.data_list.read_text(encoding="utf-8").splitlines()
    out = []
    for i, line in enumerate(lines):
        item = json.loads(line)
        if i % 3 == 0:
            item["txt"] = "今天 天气 " + item["txt"]
        out.append(json.dumps(item, ensure_ascii=False))
    corpus.data_list.write_text("\n".join(out) + "\n", encoding="utf-8")
    spk = speaker_table(corpus.data_list, root / "spk.txt")
    return root, corpus, spk


def _args(wenet, monkeypatch, config, corpus, model_dir):
    train_mod = wenet[0]
    argv = ["train.py", "--config", str(config), "--data_type", "raw",
            "--train_data", str(corpus.data_list), "--cv_data", str(corpus.data_list),
            "--model_dir", str(model_dir), "--num_workers", "1", "--prefetch", "2",
            "--device", "cpu", "--ddp.dist_backend", "gloo"]
    monkeypatch.setattr("sys.argv", argv)
    return train_mod.get_args()


def _loaders(wenet, monkeypatch, data, dataset_conf):
    import yaml

    from wenet_lhotse.dropin.compat import init_dataset_and_dataloader

    _, train_utils, init_tokenizer = wenet
    root, corpus, spk = data
    config = write_config(root / "parity.yaml", corpus.units, spk, dataset_conf)
    args = _args(wenet, monkeypatch, config, corpus, root / "exp")
    configs = yaml.safe_load(config.read_text())
    tokenizer = init_tokenizer.init_tokenizer(configs)
    theirs = train_utils.init_dataset_and_dataloader(args, copy.deepcopy(configs), tokenizer)
    ours = init_dataset_and_dataloader(args, copy.deepcopy(configs), tokenizer)
    return theirs, ours


def _by_key(loader):
    rows = {}
    for b in loader:
        for i, key in enumerate(b["keys"]):
            n, t, s = (int(b["feats_lengths"][i]), int(b["target_lengths"][i]),
                       int(b["pcm_length"][i]))
            rows[key] = {"feats": b["feats"][i, :n], "target": b["target"][i, :t].tolist(),
                         "lang": b["langs"][i], "task": b["tasks"][i],
                         "speaker": int(b["speaker"][i]), "pcm": b["pcm"][i, :s]}
    return rows


def test_cv_batches_equal_wenets_utterance_by_utterance(wenet, data, monkeypatch):
    conf = {"fbank_conf": {"num_mel_bins": 20, "frame_shift": 10, "frame_length": 25,
                           "dither": 0.0}}
    theirs, ours = _loaders(wenet, monkeypatch, data, conf)
    want, got = _by_key(theirs[3]), _by_key(ours[3])
    assert sorted(got) == sorted(want)
    worst = 0.0
    for key, w in want.items():
        g = got[key]
        assert g["feats"].shape == w["feats"].shape, key
        worst = max(worst, float((g["feats"] - w["feats"]).abs().max()))
        assert g["target"] == w["target"], key
        assert g["lang"] == w["lang"], key
        assert g["task"] == w["task"], key
        assert g["speaker"] == w["speaker"], key
        assert torch.equal(g["pcm"], w["pcm"]), key
    assert worst < 1e-3, worst
    assert {w["lang"] for w in want.values()} == {"zh", "en"}  # the test exercises langid


def test_cv_keeps_the_yamls_dither_as_wenet_does(wenet, data, monkeypatch):
    """WeNet's cv conf keeps fbank_conf.dither: two cv passes differ, as WeNet's do."""
    theirs, ours = _loaders(wenet, monkeypatch, data, None)  # dither 0.1 (aishell's)
    for loader in (theirs[3], ours[3]):
        a, b = _by_key(loader), _by_key(loader)
        assert any(not torch.equal(a[k]["feats"], b[k]["feats"]) for k in a)


def test_start_end_read_the_samples_wenets_decode_wav_reads(wenet_root, data, tmp_path):
    """``start``/``end`` (seconds) -> samples ``[int(start*sr), int(end*sr))`` as WeNet's
    ``processor.decode_wav`` loads them, for segments whose offsets are not whole samples."""
    import random

    from wenet_lhotse.formats import read_raw_list

    (processor,) = import_wenet("wenet.dataset.processor")
    _, corpus, _ = data
    rng = random.Random(0)
    lines = []
    for line in corpus.data_list.read_text(encoding="utf-8").splitlines()[:12]:
        item = json.loads(line)
        item["start"] = round(rng.uniform(0.0, 0.3), 7)
        item["end"] = round(item["start"] + rng.uniform(0.2, 0.4), 7)
        lines.append(item)
    seg = tmp_path / "seg.list"
    seg.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    cuts = {c.id: c for c in read_raw_list(seg)}
    for item in lines:
        want = processor.decode_wav(dict(item))["wav"][0]
        got = torch.from_numpy(cuts[item["key"]].load_audio()[0])
        assert got.shape == want.shape, item
        assert torch.equal(got, want), item


@pytest.mark.parametrize("conf", [{"pad_or_trim": True, "max_duration": 1},
                                  {"pad_or_trim": True, "max_duration": 3, "padding": 160}])
def test_whisper_pad_or_trim_as_wenet(wenet_root, data, conf):
    from wenet_lhotse.features.fbank import extractor_from_wenet_conf
    from wenet_lhotse.formats import read_raw_list

    (processor,) = import_wenet("wenet.dataset.processor")
    _, corpus, _ = data
    extractor = extractor_from_wenet_conf({"feats_type": "log_mel_spectrogram",
                                           "log_mel_spectrogram_conf": conf})
    for cut in list(read_raw_list(corpus.data_list))[:4]:
        wav = torch.from_numpy(cut.load_audio())
        want = processor.compute_log_mel_spectrogram(
            {"key": cut.id, "wav": wav, "sample_rate": cut.sampling_rate}, **conf)["feat"]
        got = extractor.compute([wav[0]], cut.sampling_rate)[0]
        assert got.shape == want.shape == (conf["max_duration"] * 100, 80)
        assert float((got - want).abs().max()) < 1e-4


def test_bad_audio_is_skipped_and_reported_as_wenet_skips_it(wenet, data, monkeypatch, tmp_path,
                                                             caplog):
    """A missing and a corrupt wav: WeNet's loader logs and skips them (``map_ignore_error``);
    so does ours, in train and cv, without stopping at start-up, and reports each with
    list file and line."""
    import logging

    import yaml

    from wenet_lhotse.dropin.compat import init_dataset_and_dataloader

    _, train_utils, init_tokenizer = wenet
    root, corpus, spk = data
    lines = corpus.data_list.read_text(encoding="utf-8").splitlines()
    bad = tmp_path / "bad.wav"
    bad.write_bytes(b"RIFF\x00\x00\x00\x00WAVEnot really")
    items = [json.loads(x) for x in lines[:10]]
    items[3]["wav"] = str(tmp_path / "missing.wav")
    items[6]["wav"] = str(bad)
    data_list = tmp_path / "data.list"
    data_list.write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in items),
                         encoding="utf-8")
    good = sorted(x["key"] for i, x in enumerate(items) if i not in (3, 6))
    config = write_config(tmp_path / "bad.yaml", corpus.units, spk,
                          {"fbank_conf": {"num_mel_bins": 20, "dither": 0.0}})
    configs = yaml.safe_load(config.read_text())
    monkeypatch.setattr("sys.argv", [
        "train.py", "--config", str(config), "--data_type", "raw", "--train_data",
        str(data_list), "--cv_data", str(data_list), "--model_dir", str(tmp_path / "exp"),
        "--num_workers", "1", "--prefetch", "2"])
    args = wenet[0].get_args()
    tokenizer = init_tokenizer.init_tokenizer(configs)
    theirs = train_utils.init_dataset_and_dataloader(args, copy.deepcopy(configs), tokenizer)
    with caplog.at_level(logging.WARNING):
        ours = init_dataset_and_dataloader(args, copy.deepcopy(configs), tokenizer)
    for loader in (theirs[2], theirs[3], ours[2], ours[3]):
        assert sorted(k for b in loader for k in b["keys"]) == good
    report = [str(item) for item in ours[2].skip_report]
    assert len(report) == 2, report
    assert any(f"{data_list}:4" in r and "missing.wav" in r for r in report), report
    assert any(f"{data_list}:7" in r for r in report), report


@pytest.mark.parametrize("mode", ["fixed", "off"])
def test_cv_dither_opt_ins(wenet, data, monkeypatch, mode):
    """lhotse_conf.cv_dither: ``fixed`` -- the yaml's dither with the same noise every pass
    (cv losses comparable across epochs); ``off`` -- no dither in cv."""
    conf = {"fbank_conf": {"num_mel_bins": 20, "dither": 1.0},
            "lhotse_conf": {"cv_dither": mode}}
    _, ours = _loaders(wenet, monkeypatch, data, conf)
    a, b = _by_key(ours[3]), _by_key(ours[3])
    assert all(torch.equal(a[k]["feats"], b[k]["feats"]) for k in a)
    plain = {"fbank_conf": {"num_mel_bins": 20, "dither": 0.0}}
    _, ref = _loaders(wenet, monkeypatch, data, plain)
    c = _by_key(ref[3])
    same = all(torch.equal(a[k]["feats"], c[k]["feats"]) for k in a)
    assert same == (mode == "off")


def test_step_mode_cycle_repeats_every_utterance_as_wenet(wenet, data, monkeypatch):
    """``save_interval`` in the yaml: both factories set ``dataset_conf.cycle = max_epoch``
    and one pass of the train loader holds every utterance ``max_epoch`` times."""
    import yaml

    from wenet_lhotse.dropin.compat import init_dataset_and_dataloader

    _, train_utils, init_tokenizer = wenet
    root, corpus, spk = data
    config = write_config(root / "cycle.yaml", corpus.units, spk,
                          {"fbank_conf": {"num_mel_bins": 20, "dither": 0.0}},
                          save_interval=5, max_epoch=3)
    args = _args(wenet, monkeypatch, config, corpus, root / "exp")
    configs = yaml.safe_load(config.read_text())
    tokenizer = init_tokenizer.init_tokenizer(configs)
    counts = {}
    for name, factory in (("wenet", train_utils.init_dataset_and_dataloader),
                          ("ours", init_dataset_and_dataloader)):
        conf = copy.deepcopy(configs)
        train_dl = factory(args, conf, tokenizer)[2]
        assert conf["dataset_conf"]["cycle"] == 3
        keys = [k for b in train_dl for k in b["keys"]]
        counts[name] = sorted(keys)
    assert counts["ours"] == counts["wenet"] == sorted(corpus.keys * 3)


def test_drop_in_stops_at_a_misspelled_key_naming_it(wenet, data, monkeypatch):
    import yaml

    from wenet_lhotse.dropin.compat import init_dataset_and_dataloader
    from wenet_lhotse.errors import WenetConfigError

    _, _, init_tokenizer = wenet
    root, corpus, spk = data
    config = write_config(root / "typo.yaml", corpus.units, spk,
                          {"batch_conf": {"batch_type": "static", "batch_sise": 8}})
    args = _args(wenet, monkeypatch, config, corpus, root / "exp")
    configs = yaml.safe_load(config.read_text())
    with pytest.raises(WenetConfigError, match=r"dataset_conf\.batch_conf\.batch_sise"):
        init_dataset_and_dataloader(args, configs, init_tokenizer.init_tokenizer(configs))
