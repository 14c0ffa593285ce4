"""Through WeNet's own ``train.py`` (unmodified, torch_ddp, 2 gloo ranks) on tar shards of
uneven sizes, one of them damaged: the keys WeNet's executor trains each epoch, recorded
by :mod:`wenet_harness.record_keys`, are every readable utterance exactly once -- the
same set as WeNet's own loader trains on the same data."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from lhotse import CutSet

from wenet_harness.runs import run_train, speaker_table, write_config
from wenet_lhotse.corpus import generate_corpus
from wenet_lhotse.formats import read_raw_list, write_wenet_shards

pytestmark = pytest.mark.slow

#: utterances per tar (uneven: equal steps would leave some untrained on one rank)
SIZES = [3, 17, 5, 11, 2, 9]


@pytest.fixture(scope="module")
def uneven_shards(tmp_path_factory, wenet_root):
    root = tmp_path_factory.mktemp("once_wenet")
    corpus = generate_corpus(root / "corpus", num_utterances=sum(SIZES), min_duration=0.3,
                             max_duration=0.8, seed=11)
    cuts = list(read_raw_list(corpus.data_list))
    lines, start = [], 0
    for i, n in enumerate(SIZES):
        lst = write_wenet_shards(CutSet.from_cuts(cuts[start:start + n]), root / "tars",
                                 shard_size=n, prefix=f"part{i}",
                                 list_path=root / f"part{i}.list")
        lines += Path(lst).read_text().splitlines()
        start += n
    # tar 1 (17 utterances) cut inside its 10th utterance's audio: 9 stay readable
    damaged = Path(lines[1])
    data = damaged.read_bytes()
    import tarfile

    with tarfile.open(damaged) as tar:
        members = [m for m in tar.getmembers() if m.name.endswith(".wav")]
    cut = members[9].offset_data + members[9].size // 2
    damaged.write_bytes(data[:cut])
    readable = [c.id for c in cuts[:3]] + [c.id for c in cuts[3:3 + 9]] + \
        [c.id for c in cuts[20:]]
    shard_list = root / "shards.list"
    shard_list.write_text("".join(f"{x}\n" for x in lines))
    spk = speaker_table(corpus.data_list, root / "spk.txt")
    return root, corpus, spk, shard_list, readable


def _trained(keys_dir: Path) -> dict:
    """{epoch: Counter of keys} over both ranks."""
    out: dict = {}
    for p in keys_dir.glob("keys_rank*.jsonl"):
        for line in p.read_text().splitlines():
            rec = json.loads(line)
            out.setdefault(rec["epoch"], Counter()).update(rec["keys"])
    return out


def test_wenet_train_py_two_ranks_trains_every_readable_utterance_once(uneven_shards):
    root, corpus, spk, shard_list, readable = uneven_shards
    conf = write_config(root / "once.yaml", corpus.units, spk,
                        {"batch_conf": {"batch_type": "static", "batch_size": 2}})
    trained = {}
    for how in ("wenet", "module"):
        keys_dir = root / f"keys_{how}"
        res = run_train(how, conf, [shard_list], shard_list, root / f"model_{how}",
                        data_type="shard", nproc=2, record_keys=keys_dir)
        assert res.returncode == 0, res.stdout[-4000:]
        trained[how] = _trained(keys_dir)
        if how == "module":  # our ledger line, one per epoch per rank
            ledger = [ln for ln in res.stdout.splitlines() if "utterances =" in ln]
            train = [ln for ln in ledger if "train epoch" in ln]
            assert len(train) == 2 * 2 and len(ledger) == 2 * 2 * 2, res.stdout[-3000:]
            assert all("+ 0 left over" in ln for ln in train)
            # each epoch: the two ranks' trained + skipped add up to the readable keys
            for epoch in (0, 1):
                lines = [ln for ln in train if f"train epoch {epoch} " in ln]
                trained_n = sum(int(ln.split(" = ")[1].split(" trained")[0]) for ln in lines)
                assert trained_n == len(readable), lines
    for how in ("wenet", "module"):
        assert sorted(trained[how]) == [0, 1]
        for epoch, keys in trained[how].items():
            assert max(keys.values()) == 1, (how, epoch)  # nothing twice
            assert sorted(keys) == sorted(readable), (how, epoch)  # nothing lost
