"""The epoch ledger in every epoch, not only the first (issue 28): a raw list with a
missing and a corrupt wav (map mode), a damaged tar (indexed and streamed), a cv plan,
through the real DataLoader with 0 and 2 workers over 3 epochs: ``skipped`` is the same
in each. Its labels: ``rank R/W`` as given to ``build_dataloader``, and a cv pass says
its utterances were evaluated, not trained."""

from __future__ import annotations

from pathlib import Path

import pytest

from wenet_lhotse import build_dataloader
from wenet_lhotse.convert.index import index_input
from wenet_lhotse.corpus import generate_corpus
from wenet_lhotse.text import CharTokenizer

CONF = {"batch_conf": {"batch_type": "static", "batch_size": 4},
        "lhotse_conf": {"fault_tolerant": True}}


class _Keys:
    def __getitem__(self, cuts):
        return {"keys": [c.id for c in cuts]}


@pytest.fixture(scope="module")
def damaged(tmp_path_factory):
    """24 utterances in tars of 6: the raw list misses one wav and has one corrupt; the
    shard list's second tar is cut short (its last utterances unreadable), indexed
    beside a copy of the list that is not."""
    root = tmp_path_factory.mktemp("ledger")
    c = generate_corpus(root / "c", num_utterances=24, max_duration=1.5, shard_size=6, seed=4)
    (root / "c" / "wav" / f"{c.keys[3]}.wav").unlink()
    (root / "c" / "wav" / f"{c.keys[5]}.wav").write_bytes(b"RIFF" + b"\0" * 100)
    tar = Path(c.shards_list.read_text().split()[1])
    data = tar.read_bytes()
    tar.write_bytes(data[: len(data) * 2 // 3])
    streamed = root / "streamed.list"
    streamed.write_text(c.shards_list.read_text())
    index_input(str(c.shards_list))
    return {"raw": c.data_list, "indexed": c.shards_list, "streamed": streamed,
            "tok": CharTokenizer(c.units)}


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("kind,mode,skipped", [
    ("raw", "map", 2), ("indexed", "map", 1), ("streamed", "streamed", 1)])
def test_skips_counted_in_every_epoch(damaged, kind, mode, skipped, num_workers):
    _, loader = build_dataloader(str(damaged[kind]), damaged["tok"], CONF, "train",
                                 dataset=_Keys(), num_workers=num_workers, seed=1)
    ledgers = []
    for _ in range(3):
        keys = [k for b in loader for k in b["keys"]]
        led = loader.epoch_ledger()
        assert led.trained == len(keys) == len(set(keys))
        ledgers.append((led.mode, led.trained, led.skipped, led.total))
    assert ledgers[0][:3] == (mode, ledgers[0][1], skipped)
    assert ledgers == [ledgers[0]] * 3
    # the report lists each epoch's skips, named (a list line, or a tar)
    assert len(loader.skip_report) == 3 * skipped


def test_cv_plan_counts_its_skips_every_pass(damaged):
    _, cv = build_dataloader(str(damaged["raw"]), damaged["tok"], CONF, "cv",
                             dataset=_Keys(), seed=1)
    for _ in range(3):
        assert sum(len(b["keys"]) for b in cv) == 22
        led = cv.epoch_ledger()
        assert (led.trained, led.skipped, led.total) == (22, 2, 24)
        assert "22 evaluated in" in led.line() and "trained" not in led.line()


def test_ledger_ranks_as_given(damaged, caplog):
    """world_size/rank given as arguments (no torch.distributed): the ledger says them."""
    for rank in (0, 1):
        _, loader = build_dataloader(str(damaged["raw"]), damaged["tok"], CONF, "train",
                                     dataset=_Keys(), seed=1, world_size=2, rank=rank)
        with caplog.at_level("INFO", logger="wenet_lhotse.loader.ledger"):
            for _ in loader:
                pass
        led = loader.epoch_ledger()
        assert (led.rank, led.world_size) == (rank, 2)
        assert f"rank {rank}/2 " in caplog.records[-1].getMessage()
        # map mode: rank 0 reports the reader's skips, so the ranks sum to the epoch
        assert led.skipped == (2 if rank == 0 else 0)
