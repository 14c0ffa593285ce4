"""Loader mechanics on real Lhotse objects: epochs, determinism, Lhotse equivalence,
mux, tags, cv."""

from __future__ import annotations

import random
from collections import Counter

import numpy as np
import pytest
from lhotse import CutSet
from lhotse.dataset.sampling.dynamic_bucketing import DynamicBucketingSampler
from lhotse.utils import fastcopy

from wenet_lhotse.formats import read_raw_list
from wenet_lhotse.loader.build import build_dataloader, estimate_bins
from wenet_lhotse.loader.config import LoaderConfig
from wenet_lhotse.loader.distributed import DataWaitMeter, plan_partition, reduce_cv_loss
from wenet_lhotse.loader.resume import (
    JsonlReader,
    PositionedStream,
    ResumableBucketingSampler,
    ResumableMux,
)
from wenet_lhotse.sources import SourceSpec, detect_source_type, mux_sources

CONF = {"batch_conf": {"batch_type": "dynamic", "max_frames_in_batch": 1200},
        "lhotse_conf": {"num_buckets": 3, "buffer_size": 40}}


class Keys:
    """A real map-style dataset returning what the tests look at."""

    def __getitem__(self, cuts):
        return [(c.id, (c.custom or {}).get("lang")) for c in cuts]


@pytest.fixture(scope="module")
def data(corpus, tmp_path_factory):
    root = tmp_path_factory.mktemp("loader")
    cuts = CutSet.from_cuts(list(read_raw_list(corpus.data_list)))
    cuts.to_file(root / "cuts.jsonl.gz")
    shar = root / "shar"
    shar.mkdir()
    cuts.to_shar(shar, fields={"recording": "flac"}, shard_size=6)
    # Two larger metadata-only sources (ids renamed copies of real cuts) for mux statistics.
    big = []
    for name in ("a", "b"):
        path = root / f"{name}.jsonl.gz"
        CutSet.from_cuts(fastcopy(c, id=f"{name}-{i}") for i, c in
                         enumerate(list(cuts) * 150)).to_file(path)
        big.append(path)
    return {"cuts": cuts, "manifest": root / "cuts.jsonl.gz", "shar": shar, "big": big,
            "raw": corpus.data_list}


def _epoch(loader):
    return [[k for k, _ in b] for b in loader]


def test_detect_source_type(data):
    assert detect_source_type(data["manifest"]) == "cuts"
    assert detect_source_type(data["raw"]) == "raw"
    assert detect_source_type(data["shar"]) == "shar"
    with pytest.raises(ValueError, match="weight"):
        SourceSpec(path=str(data["raw"]), weight=0)


@pytest.mark.parametrize("kind", ["manifest", "raw", "shar"])
def test_epochs_cover_all_once_and_reshuffle(data, kind):
    _, loader = build_dataloader(str(data[kind]), None, CONF, "train", dataset=Keys(), seed=3)
    e0, e1 = _epoch(loader), _epoch(loader)  # no set_epoch between: WeNet never calls it
    ids = sorted(c.id for c in data["cuts"])
    for e in (e0, e1):
        assert sorted(k for b in e for k in b) == ids
    assert e0 != e1
    assert loader.bucketing_sampler.epoch == 1


def test_same_seed_same_batches_other_seed_differs(data):
    def run(seed):
        _, loader = build_dataloader(str(data["manifest"]), None, CONF, "train",
                                     dataset=Keys(), seed=seed)
        return _epoch(loader) + _epoch(loader)

    assert run(5) == run(5)
    assert run(5) != run(6)


def test_sampler_matches_lhotse_dynamic_bucketing(data):
    """Our resumable sampler draws exactly the batches Lhotse's own sampler draws."""
    bins = estimate_bins(list(data["cuts"]), 3)
    kw = dict(max_duration=12.0, shuffle=True, buffer_size=12, seed=11, world_size=1, rank=0)
    ours = ResumableBucketingSampler(
        ResumableMux([PositionedStream(JsonlReader([str(data["manifest"])]))], seed=11),
        duration_bins=bins, **kw)
    theirs = DynamicBucketingSampler(CutSet.from_jsonl_lazy(data["manifest"]),
                                     duration_bins=bins, **kw)
    for epoch in range(2):
        theirs.set_epoch(epoch)
        assert [[c.id for c in b] for b in ours] == [[c.id for c in b] for b in theirs]


def test_resumable_mux_matches_cutset_mux(data):
    a, b = (CutSet.from_jsonl_lazy(p) for p in data["big"])
    lhotse_ids = [c.id for c in CutSet.mux(a, b, weights=[0.7, 0.3], seed=4)][:500]
    mux = ResumableMux([PositionedStream(JsonlReader([str(p)])) for p in data["big"]],
                       weights=[0.7, 0.3], seed=4)
    mux.start(0)
    assert [next(mux).id for _ in range(500)] == lhotse_ids


@pytest.mark.parametrize("which", ["ours", "lhotse"])
def test_mux_proportions_follow_weights(data, which):
    specs = [SourceSpec(path=str(data["big"][0]), weight=3, tags={"lang": "zh"}),
             SourceSpec(path=str(data["big"][1]), weight=1, tags={"lang": "en"})]
    if which == "ours":
        _, loader = build_dataloader(specs, None, CONF, "train", dataset=Keys(), seed=1)
        mux = loader.bucketing_sampler.mux
        mux.start(0)
        draws = [next(mux) for _ in range(2000)]
    else:
        from wenet_lhotse.sources import open_source

        cs = mux_sources([open_source(s) for s in specs], [s.weight for s in specs], seed=1)
        draws = list(cs.subset(first=2000))
    share = Counter(c.custom["lang"] for c in draws)["zh"] / 2000
    assert abs(share - 0.75) <= 0.03


def test_tags_reach_batches(data):
    specs = [{"path": str(data["manifest"]), "tags": {"lang": "zh"}},
             {"path": str(data["raw"]), "type": "raw", "tags": {"lang": "en"}, "weight": 2}]
    _, loader = build_dataloader(specs, None, CONF, "train", dataset=Keys(), seed=0)
    langs = Counter(lang for b in loader for _, lang in b)
    assert langs == {"zh": 20, "en": 20}


def test_batch_conf_translation():
    assert LoaderConfig.from_wenet({"batch_conf": {"batch_type": "dynamic",
                                                   "max_frames_in_batch": 12000}}
                                   ).batching.max_duration == pytest.approx(120.0)
    static = LoaderConfig.from_wenet({"batch_conf": {"batch_type": "static", "batch_size": 16}})
    assert static.batching.resolve(4.5) == pytest.approx(72.0)
    cfg = LoaderConfig.from_wenet({"shuffle_conf": {"shuffle_size": 50000}}, "cv")
    assert cfg.buffer_size == 50000 and cfg.shuffle is False
    with pytest.raises(ValueError, match="unknown lhotse_conf keys"):
        LoaderConfig.from_wenet({"lhotse_conf": {"max_duraton": 3}})


def test_static_batches_hold_about_batch_size_cuts(data):
    conf = {"batch_conf": {"batch_type": "static", "batch_size": 4},
            "lhotse_conf": {"num_buckets": 2, "buffer_size": 40}}
    _, loader = build_dataloader(str(data["manifest"]), None, conf, "train", dataset=Keys())
    sizes = [len(b) for b in loader]
    assert 2.5 <= sum(sizes) / len(sizes) <= 5.5


def test_plan_partition_splits_largest_batches(data):
    cuts = list(data["cuts"])
    plan = plan_partition([CutSet.from_cuts(cuts[:5]), CutSet.from_cuts(cuts[5:6]),
                           CutSet.from_cuts(cuts[6:7])], 2)
    assert len(plan) == 4
    assert [c.id for b in plan for c in b] == [c.id for c in cuts[:7]]
    with pytest.raises(ValueError, match="fewer than"):
        plan_partition([CutSet.from_cuts(cuts[:1])], 2)


class Audio:
    def __getitem__(self, cuts):
        return {c.id: c.load_audio() for c in cuts}


def test_shar_audio_is_attached_for_emitted_batches(data):
    _, loader = build_dataloader(str(data["shar"]), None, CONF, "train", dataset=Audio())
    got = {k: v for b in loader for k, v in b.items()}
    ref = {c.id: c.load_audio() for c in data["cuts"]}
    assert got.keys() == ref.keys()
    for k in ref:  # flac is lossless: the same samples as the original wav
        assert np.max(np.abs(np.asarray(got[k]) - np.asarray(ref[k]))) < 1e-4


def test_cv_plan_partitions_without_duplicates(data):
    parts = []
    for rank in range(3):
        _, loader = build_dataloader(str(data["manifest"]), None, CONF, "cv", dataset=Keys(),
                                     world_size=3, rank=rank)
        parts.append(_epoch(loader))
    assert len({len(p) for p in parts}) == 1  # equal steps
    keys = [k for p in parts for b in p for k in b]
    assert sorted(keys) == sorted(c.id for c in data["cuts"])
    conf = {**CONF, "lhotse_conf": {**CONF["lhotse_conf"], "cv_partition": False}}
    _, loader = build_dataloader(str(data["manifest"]), None, conf, "cv", dataset=Keys(),
                                 world_size=3, rank=1)
    assert sorted(k for b in _epoch(loader) for k in b) == sorted(c.id for c in data["cuts"])
    mean, n = reduce_cv_loss(sum(c.duration for c in data["cuts"]), len(data["cuts"]))
    assert n == 20 and mean == pytest.approx(sum(c.duration for c in data["cuts"]) / 20)


def test_data_wait_meter():
    import time

    def slow():
        for i in range(3):
            time.sleep(0.05)
            yield i

    meter = DataWaitMeter()
    for _ in meter.wrap(slow()):
        time.sleep(0.01)
    assert meter.batches == 3
    assert 0.6 < meter.fraction < 1.0
    random.seed(0)


def test_streamed_shar_in_workers_reads_every_cut_once(data):
    conf = {**CONF, "lhotse_conf": {**CONF["lhotse_conf"], "mode": "streamed"}}
    _, loader = build_dataloader(str(data["shar"]), None, conf, "train", dataset=Audio(),
                                 num_workers=2, seed=1)
    for _ in range(2):
        got = [k for b in loader for k in b]
        assert sorted(got) == sorted(c.id for c in data["cuts"])


def test_wenet_dataset_conf_defaults_match_wenet(corpus):
    """WeNet's dataset.py: resample to 16 kHz unless resample_conf says otherwise, spec_aug
    on unless `spec_aug: false`, speed perturb off unless on; cv never augments."""
    from wenet_lhotse.loader import make_wenet_dataset
    from wenet_lhotse.text import CharTokenizer

    tok = CharTokenizer(corpus.units)
    train = make_wenet_dataset(tok, {}, "train").features.pipeline
    assert train.resample_to == 16000 and train.spec_aug is not None
    assert train.speeds is None and train.spec_sub is None and train.spec_trim is None
    conf = {"resample_conf": {"resample_rate": 8000}, "spec_aug": False, "speed_perturb": True}
    tuned = make_wenet_dataset(tok, conf, "train").features.pipeline
    assert tuned.resample_to == 8000 and tuned.spec_aug is None
    assert tuned.speeds == (0.9, 1.0, 1.1)
    cv = make_wenet_dataset(tok, {"speed_perturb": True}, "cv").features.pipeline
    assert cv.spec_aug is None and cv.speeds is None


@pytest.mark.parametrize("num_workers", [0, 1])
def test_fault_tolerant_skips_reach_the_main_process(tmp_path, num_workers):
    """A cut whose audio is corrupt is dropped in the DataLoader worker and still counted
    in loader.skip_report (main process), with its cut id and file; nothing else is lost."""
    from wenet_lhotse.corpus import generate_corpus
    from wenet_lhotse.loader import build_dataloader
    from wenet_lhotse.text import CharTokenizer

    c = generate_corpus(tmp_path / "c", num_utterances=8, max_duration=2.0, seed=4)
    conf = {"fbank_conf": {"num_mel_bins": 40}, "lhotse_conf": {"fault_tolerant": True}}
    _, loader = build_dataloader(c.data_list, CharTokenizer(c.units), conf, "cv",
                                 num_workers=num_workers)
    bad = c.root / "wav" / f"{c.keys[3]}.wav"
    bad.write_bytes(b"RIFF" + b"\x00" * 100)  # headers were read at build time; now corrupt
    keys = [k for batch in loader for k in batch["keys"]]
    assert sorted(keys) == sorted(set(c.keys) - {c.keys[3]})
    items = list(loader.skip_report)
    assert len(items) == 1 and c.keys[3] in items[0].message and str(bad) in str(items[0])


def test_fault_tolerant_streamed_reader_skips_reach_the_main_process(tmp_path):
    """Streamed shards: a tar member without its partner is skipped by the reader inside
    the DataLoader worker and reported in loader.skip_report as tar[member]."""
    import io
    import tarfile

    from wenet_lhotse.corpus import generate_corpus
    from wenet_lhotse.loader import build_dataloader
    from wenet_lhotse.text import CharTokenizer

    c = generate_corpus(tmp_path / "c", num_utterances=6, max_duration=2.0, shard_size=3,
                        seed=5)
    tar_path = c.shards_list.read_text().split()[0]
    with tarfile.open(tar_path, "a") as tar:  # an orphan .wav with no .txt
        data = (c.root / "wav" / f"{c.keys[0]}.wav").read_bytes()
        info = tarfile.TarInfo("orphan.wav")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    conf = {"fbank_conf": {"num_mel_bins": 40}, "lhotse_conf": {"fault_tolerant": True}}
    _, loader = build_dataloader(c.shards_list, CharTokenizer(c.units), conf, "train",
                                 num_workers=1)
    keys = [k for batch in loader for k in batch["keys"]]
    assert sorted(keys) == sorted(c.keys)
    items = list(loader.skip_report)
    assert [i.kind for i in items] == ["unpaired"]
    assert items[0].source == tar_path and items[0].member == "orphan.wav"


@pytest.mark.parametrize("num_workers", [0, 2])
def test_cv_from_shards_streams_every_cut_once(tmp_path, num_workers):
    """A cv shard list is streamed (not loaded into memory): every utterance exactly once,
    whatever the workers; with cv_partition, two ranks read disjoint halves of the tars."""
    from wenet_lhotse.corpus import generate_corpus
    from wenet_lhotse.loader import build_dataloader
    from wenet_lhotse.text import CharTokenizer

    c = generate_corpus(tmp_path / "c", num_utterances=12, max_duration=2.0, shard_size=3,
                        seed=6)
    tok = CharTokenizer(c.units)
    conf = {"fbank_conf": {"num_mel_bins": 40}}
    _, loader = build_dataloader(c.shards_list, tok, conf, "cv", num_workers=num_workers)
    assert loader.mode == "streamed"
    for _ in range(2):  # a second epoch sees the same set again
        keys = [k for b in loader for k in b["keys"]]
        assert sorted(keys) == sorted(c.keys)
    part = {"fbank_conf": {"num_mel_bins": 40}, "lhotse_conf": {"cv_partition": True}}
    per_rank = [[k for b in build_dataloader(c.shards_list, tok, part, "cv", world_size=2,
                                             rank=r, num_workers=num_workers)[1]
                 for k in b["keys"]] for r in (0, 1)]
    assert not set(per_rank[0]) & set(per_rank[1])
    assert sorted(per_rank[0] + per_rank[1]) == sorted(c.keys)


def test_shar_on_object_storage_streams_over_http(tmp_path, http_serve):
    """A Shar source given by URLs (Lhotse's `fields`), fetched with `pipe:curl` from a real
    HTTP server: streamed in DataLoader workers, every cut once per epoch, with tags."""
    import shutil

    from wenet_lhotse.convert import wenet_to_shar
    from wenet_lhotse.corpus import generate_corpus
    from wenet_lhotse.loader import build_dataloader
    from wenet_lhotse.text import CharTokenizer

    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    c = generate_corpus(tmp_path / "c", num_utterances=9, max_duration=2.0, seed=7)
    shar = wenet_to_shar(c.data_list, tmp_path / "shar", shard_size=3).out_dir
    base = http_serve(shar)
    fields = {"cuts": [f"pipe:curl -sf {base}/cuts.{i:06d}.jsonl.gz | gunzip -c"
                       for i in range(3)],
              "recording": [f"pipe:curl -sf {base}/recording.{i:06d}.tar" for i in range(3)]}
    source = {"fields": fields, "tags": {"lang": "xx"}}
    conf = {"fbank_conf": {"num_mel_bins": 40}}
    _, loader = build_dataloader([source], CharTokenizer(c.units), conf, "train",
                                 num_workers=2)
    assert loader.mode == "streamed"
    for _ in range(2):
        batches = list(loader)
        assert sorted(k for b in batches for k in b["keys"]) == sorted(c.keys)
        assert {lang for b in batches for lang in b["langs"]} == {"xx"}
    with pytest.raises(ValueError, match="can only be streamed"):
        build_dataloader([source], CharTokenizer(c.units),
                         {**conf, "lhotse_conf": {"mode": "map"}}, "train")
