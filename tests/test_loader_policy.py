"""build_dataloader reads every source with ONE policy made from lhotse_conf
(LhotseConf.read_policy): ``url_protocols`` reaches the shard reader in streamed and in
map-style loading (fsspec's real in-memory filesystem stands for a protocol that is not
allowed by default)."""

from __future__ import annotations

import fsspec
import pytest

from wenet_lhotse.corpus import generate_corpus
from wenet_lhotse.errors import SkipReport
from wenet_lhotse.loader.build import build_dataloader


class Keys:
    def __getitem__(self, cuts):
        return [c.id for c in cuts]


@pytest.fixture(scope="module")
def memory_list(tmp_path_factory):
    corpus = generate_corpus(tmp_path_factory.mktemp("mem"), num_utterances=4,
                             max_duration=1.5, shard_size=4, seed=2)
    tar = corpus.shards_list.read_text(encoding="utf-8").split()[0]
    with open(tar, "rb") as f:
        fsspec.filesystem("memory").pipe("/r1-policy/a.tar", f.read())
    lst = corpus.shards_list.parent / "memory.list"
    lst.write_text("memory://r1-policy/a.tar\n", encoding="utf-8")
    return lst


def _keys(path, conf, split, report):
    """Every key the loader gives, or ``None`` when it finds no cut to train on."""
    try:
        _, loader = build_dataloader(str(path), None, conf, split, dataset=Keys(),
                                     skip_report=report)
        return [k for b in loader for k in b]
    except ValueError as err:  # map-style training plans its buckets from the cuts
        assert "no cuts in" in str(err)
        return None


@pytest.mark.parametrize("split,mode", [("cv", "auto"), ("train", "map")])
def test_url_protocols_from_lhotse_conf_reach_the_readers(memory_list, split, mode):
    conf = {"batch_conf": {"batch_type": "static", "batch_size": 2},
            "lhotse_conf": {"fault_tolerant": True, "mode": mode, "shard_index": False}}
    report = SkipReport(log=False)
    assert not _keys(memory_list, conf, split, report)
    assert [i.kind for i in report] == ["refused"] and "url_protocols" in report.items[0].message
    report = SkipReport(log=False)
    conf["lhotse_conf"]["url_protocols"] = ["memory"]
    assert len(_keys(memory_list, conf, split, report)) == 4 and len(report) == 0
