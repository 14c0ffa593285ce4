"""Training input straight from S3 (moto's server on 127.0.0.1): a Shar prefix and a
WeNet shard list whose tars are objects; a connection cut mid-tar loses nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
from lhotse import CutSet

from wenet_lhotse.convert.shar import wenet_to_shar
from wenet_lhotse.corpus import generate_corpus
from wenet_lhotse.loader.build import build_dataloader

CONF = {"batch_conf": {"batch_type": "dynamic", "max_frames_in_batch": 1000},
        "lhotse_conf": {"num_buckets": 2, "buffer_size": 50}}


class Keys:
    def __getitem__(self, cuts):
        return [c.id for c in cuts]


@pytest.fixture(scope="module")
def corpus_s3(tmp_path_factory):
    root = tmp_path_factory.mktemp("s3corpus")
    c = generate_corpus(root, num_utterances=16, min_duration=0.5, max_duration=1.0,
                        shard_size=4, seed=41)
    wenet_to_shar(c.shards_list, root / "shar", num_jobs=1)
    return c, root / "shar"


def upload(s3, corpus, shar_dir: Path):
    fs = s3.fs()
    s3.put_dir(shar_dir, "train/shar")
    tars = corpus.shards_list.read_text().split()
    for t in tars:
        fs.put_file(t, f"{s3.bucket}/train/shards/{Path(t).name}")
    fs.pipe_file(f"{s3.bucket}/train/shards.list", "".join(
        s3.url(f"train/shards/{Path(t).name}") + "\n" for t in tars).encode())


def epoch_keys(source, workers: int = 1):
    _, loader = build_dataloader(source, None, CONF, "train", dataset=Keys(), seed=5,
                                 num_workers=workers)
    return sorted(k for batch in loader for k in batch)


@pytest.mark.parametrize("what", ["train/shar", "train/shards.list"])
def test_train_from_s3_with_a_dropped_connection(corpus_s3, s3_proxy, what):
    corpus, shar_dir = corpus_s3
    s3, proxy = s3_proxy
    upload(s3, corpus, shar_dir)
    proxy.arm(cut_after=30_000)  # the first tar response is cut short once
    got = epoch_keys(s3.url(what))
    assert proxy.faults_done == 1
    assert got == sorted(corpus.keys)  # every utterance, once


def test_shar_prefix_audio_equals_local(corpus_s3, s3):
    corpus, shar_dir = corpus_s3
    upload(s3, corpus, shar_dir)
    from wenet_lhotse.sources import open_cuts

    remote, kind = open_cuts(s3.url("train/shar"))
    assert kind == "shar"
    local = {c.id: c for c in CutSet.from_shar(in_dir=shar_dir)}
    got = list(remote)
    assert sorted(c.id for c in got) == sorted(local)
    for c in got:
        assert (c.load_audio() == local[c.id].load_audio()).all()


def test_cuts_manifest_on_s3_map_mode(corpus_cuts, s3):
    """A cuts manifest object is a map-style source (audio files stay local)."""
    corpus_cuts.to_file(s3.url("cuts.jsonl.gz"))
    got = epoch_keys(s3.url("cuts.jsonl.gz"), workers=0)
    assert got == sorted(c.id for c in corpus_cuts)
