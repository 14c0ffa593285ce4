"""Mixed speech + text streams under real DDP (torchrun, 2 ranks, gloo) and through the
drop-in (``init_dataset_and_dataloader`` with ``lhotse_conf.sources``) with WeNet's own
tokenizer: equal steps, one kind per step on every rank, every item once per epoch,
exact resume mid-epoch."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from wenet_lhotse.dropin.compat import init_dataset_and_dataloader

HERE = Path(__file__).parent
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def texts(corpus, tmp_path_factory):
    root = tmp_path_factory.mktemp("mixed_ddp")
    chars = [line.split()[0] for line in corpus.units.read_text(encoding="utf-8").splitlines()
             if not line.startswith("<")]
    rng = random.Random(3)
    lines = ["".join(rng.choice(chars) for _ in range(rng.randint(2, 25))) for _ in range(37)]
    path = root / "lm.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    keys = [json.loads(x)["key"] for x in corpus.data_list.read_text().splitlines()]
    return {"path": path, "lines": lines, "keys": keys}


def test_ddp_two_ranks_mixed_stream(corpus, texts, tmp_path):
    from servers import free_port

    sources = [{"path": str(corpus.data_list), "type": "raw", "weight": 2},
               {"path": str(texts["path"]), "type": "text", "weight": 1,
                "tags": {"task": "lm"}}]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
           f"--master_port={free_port()}", "--master_addr=127.0.0.1",
           str(HERE / "ddp_mixed.py"), json.dumps(sources), str(corpus.units), str(tmp_path)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    expected = set(texts["keys"]) | {f"lm.txt:{i + 1}" for i in range(len(texts["lines"]))}
    for epoch in range(2):
        steps = [r["epochs"][epoch] for r in ranks]
        assert len(steps[0]) == len(steps[1]) > 0
        assert [s[0] for s in steps[0]] == [s[0] for s in steps[1]]  # same kind each step
        seen = Counter(k for s in steps for _, keys, _ in s for k in keys)
        assert set(seen) == expected and set(seen.values()) == {1}
        for kind, keys, shape in steps[0]:
            assert (shape is not None) == (kind == "asr")
            if shape:
                assert shape[0] == len(keys) and shape[2] == 40
    assert ranks[0]["epochs"][0] != ranks[0]["epochs"][1]  # reshuffled
    assert all(r["resumed_ok"] for r in ranks)


def test_drop_in_sources_with_wenet_tokenizer(corpus, texts, wenet_root):
    from wenet_harness import wenet_char_tokenizer

    tok = wenet_char_tokenizer(corpus.units)
    configs = {"dataset_conf": {
        "batch_conf": {"batch_type": "static", "batch_size": 4},
        "fbank_conf": {"num_mel_bins": 80, "frame_length": 25, "frame_shift": 10, "dither": 0.0},
        "filter_conf": {"token_max_length": 20},
        "lhotse_conf": {"max_tokens_in_batch": 80, "sources": [
            {"path": str(corpus.data_list), "type": "raw", "weight": 1},
            {"path": str(texts["path"]), "type": "text", "weight": 1, "tags": {"task": "lm"}}],
            "cv_sources": [{"path": str(corpus.data_list), "type": "raw"}]}}}
    args = SimpleNamespace(train_data=None, cv_data=None, data_type="raw", num_workers=0,
                           pin_memory=False, prefetch=2)
    _, _, train, cv = init_dataset_and_dataloader(args, configs, tok)
    by_key = {f"lm.txt:{i + 1}": line for i, line in enumerate(texts["lines"])}
    kept = {k for k, line in by_key.items() if len(tok.tokenize(line)[1]) <= 20}
    got = Counter()
    for batch in train:
        got[batch["kind"]] += len(batch["keys"])
        if batch["kind"] == "text":
            assert "feats" not in batch and set(batch["tasks"]) == {"lm"}
            for row, key in enumerate(batch["keys"]):
                ids = tok.tokenize(by_key[key])[1]  # WeNet's own tokenizer's ids
                n = int(batch["target_lengths"][row])
                assert batch["target"][row, :n].tolist() == list(ids)
        else:
            assert batch["kind"] == "asr" and batch["feats"].dtype == torch.float32
            assert batch["feats"].shape[2] == 80
    # filter_conf.token_max_length applies to text as to speech; every kept item once
    lines = [json.loads(x) for x in corpus.data_list.read_text().splitlines()]
    asr = [x for x in lines if len(tok.tokenize(x["txt"])[1]) <= 20]
    assert got == {"asr": len(asr), "text": len(kept)} and len(kept) < 37
    assert all("kind" not in b for b in cv)  # cv: WeNet's batches as before


def test_drop_in_two_ranks_equal_steps_every_item_once(corpus, texts, monkeypatch):
    """The drop-in as torchrun would start it for ranks 0 and 1 of 2 (WORLD_SIZE/RANK)."""
    from wenet_lhotse import CharTokenizer

    tok = CharTokenizer(corpus.units)
    args = SimpleNamespace(train_data=None, cv_data=None, data_type="raw", num_workers=0,
                           pin_memory=False, prefetch=2)
    ranks = []
    for rank in (0, 1):
        monkeypatch.setenv("WORLD_SIZE", "2")
        monkeypatch.setenv("RANK", str(rank))
        configs = {"dataset_conf": {
            "batch_conf": {"batch_type": "static", "batch_size": 3},
            "fbank_conf": {"num_mel_bins": 40, "dither": 0.0},
            "lhotse_conf": {"max_tokens_in_batch": 64, "sources": [
                {"path": str(corpus.data_list), "type": "raw", "weight": 2},
                {"path": str(texts["path"]), "type": "text"}],
                "cv_sources": [{"path": str(corpus.data_list), "type": "raw"}]}}}
        train = init_dataset_and_dataloader(args, configs, tok)[2]
        ranks.append([(b["kind"], list(b["keys"])) for b in train])
    assert len(ranks[0]) == len(ranks[1]) > 0
    assert [k for k, _ in ranks[0]] == [k for k, _ in ranks[1]]
    seen = Counter(k for r in ranks for _, keys in r for k in keys)
    expected = set(texts["keys"]) | {f"lm.txt:{i + 1}" for i in range(len(texts["lines"]))}
    assert set(seen) == expected and set(seen.values()) == {1}
