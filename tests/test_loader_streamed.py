"""loader.streamed: each (rank, worker) reads its own tars, every cut once."""

from __future__ import annotations

import pytest
from loader_common import CONF, Audio

from wenet_lhotse.loader.build import build_dataloader


def test_streamed_shar_in_workers_reads_every_cut_once(data):
    conf = {**CONF, "lhotse_conf": {**CONF["lhotse_conf"], "mode": "streamed"}}
    _, loader = build_dataloader(str(data["shar"]), None, conf, "train", dataset=Audio(),
                                 num_workers=2, seed=1)
    for _ in range(2):
        got = [k for b in loader for k in b]
        assert sorted(got) == sorted(c.id for c in data["cuts"])


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
        pytest.skip("curl is not installed")  # a system tool, not of the test extra: a plain skip
    c = generate_corpus(tmp_path / "c", num_utterances=9, max_duration=2.0, seed=7)
    shar = wenet_to_shar(c.data_list, tmp_path / "shar", shard_size=3).out_dir
    base = http_serve(shar)
    fields = {"cuts": [f"pipe:curl -sf {base}/cuts.{i:06d}.jsonl.gz | gunzip -c"
                       for i in range(3)],
              "recording": [f"pipe:curl -sf {base}/recording.{i:06d}.tar" for i in range(3)]}
    source = {"fields": fields, "tags": {"lang": "xx"}}
    with pytest.raises(ValueError, match="allow_pipe"):  # commands only when allowed
        _, loader = build_dataloader([source], CharTokenizer(c.units),
                                     {"fbank_conf": {"num_mel_bins": 40}}, "train")
        next(iter(loader))
    conf = {"fbank_conf": {"num_mel_bins": 40}, "lhotse_conf": {"allow_pipe": True}}
    _, loader = build_dataloader([source], CharTokenizer(c.units), conf, "train",
                                 num_workers=2)
    assert loader.mode == "streamed"
    for _ in range(2):
        batches = list(loader)
        assert sorted(k for b in batches for k in b["keys"]) == sorted(c.keys)
        assert {lang for b in batches for lang in b["langs"]} == {"xx"}
    with pytest.raises(ValueError, match="can only be streamed"):
        build_dataloader([source], CharTokenizer(c.units),
                         {**conf, "lhotse_conf": {"mode": "map", "allow_pipe": True}}, "train")
