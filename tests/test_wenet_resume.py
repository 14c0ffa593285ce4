"""Mid-epoch resume through WeNet's own ``train.py`` (``python -m wenet_lhotse.dropin.train``,
unmodified ``train.py``): the loader state written beside a ``save_interval`` step
checkpoint makes a run started with ``--checkpoint step_N.pt`` train exactly the batches
an uninterrupted run trained after that checkpoint; ``resume_loader: false`` keeps
WeNet's replay of the epoch from its start."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from wenet_harness.runs import run_train, speaker_table, write_config
from wenet_lhotse.corpus import generate_corpus
from wenet_lhotse.dropin.resume import loader_state_path
from wenet_lhotse.loader.state_check import read_state_file


class _Payload:
    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        import os

        return (os.system, (f"touch {self.marker}",))

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def data(tmp_path_factory, wenet_root):
    root = tmp_path_factory.mktemp("wenet_resume")
    corpus = generate_corpus(root / "corpus", num_utterances=40, min_duration=0.3,
                             max_duration=0.9, shard_size=7, seed=8)
    return root, corpus, speaker_table(corpus.data_list, root / "spk.txt")


def _keys(keys_dir: Path) -> list:
    return [json.loads(ln)["keys"] for ln in
            (keys_dir / "keys_rank0.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("data_type", ["raw", "shard"])
def test_step_checkpoint_resume_continues_with_the_next_batch(data, data_type):
    root, corpus, spk = data
    lists = {"raw": corpus.data_list, "shard": corpus.shards_list}
    train = lists[data_type]
    # step mode: 2 passes over 40 utterances in batches of 4, a checkpoint every 6 steps
    conf = write_config(root / f"{data_type}.yaml", corpus.units, spk,
                        {"batch_conf": {"batch_type": "static", "batch_size": 4}},
                        save_interval=6)
    full = root / f"full_{data_type}"
    res = run_train("module", conf, [train], train, full, data_type=data_type,
                    record_keys=full / "keys")
    assert res.returncode == 0, res.stdout[-4000:]
    uninterrupted = _keys(full / "keys")
    ckpt = full / "step_11.pt"  # after 12 steps (WeNet counts from 0)
    state = loader_state_path(ckpt, 0)
    assert ckpt.exists() and state.exists()
    assert read_state_file(state)["mode"] in ("map", "streamed")  # plain data
    resumed = root / f"resumed_{data_type}"
    res = run_train("module", conf, [train], train, resumed, data_type=data_type,
                    record_keys=resumed / "keys", extra=["--checkpoint", str(ckpt)])
    assert res.returncode == 0, res.stdout[-4000:]
    assert "train loader resumed from" in res.stdout
    assert _keys(resumed / "keys") == uninterrupted[12:]
    if data_type == "raw":  # the opt-out: WeNet's replay from the epoch's start
        opt_out = write_config(root / "replay.yaml", corpus.units, spk,
                               {"batch_conf": {"batch_type": "static", "batch_size": 4},
                                "lhotse_conf": {"resume_loader": False}},
                               save_interval=6)
        replay = root / "replay"
        res = run_train("module", opt_out, [train], train, replay, data_type=data_type,
                        record_keys=replay / "keys", extra=["--checkpoint", str(ckpt)])
        assert res.returncode == 0, res.stdout[-4000:]
        assert _keys(replay / "keys") == uninterrupted
        assert not loader_state_path(replay / "step_11.pt", 0).exists()
        # issue 30: a planted state beside the checkpoint runs nothing under train.py:
        # one warning naming it, and WeNet's replay
        planted = root / "planted"
        planted.mkdir()
        ckpt2 = planted / "step_11.pt"
        ckpt2.write_bytes(ckpt.read_bytes())
        marker = root / "PWNED"
        torch.save({"mode": "map", "sampler": _Payload(marker)}, loader_state_path(ckpt2, 0))
        res = run_train("module", conf, [train], train, planted / "run", data_type=data_type,
                        record_keys=planted / "keys", extra=["--checkpoint", str(ckpt2)])
        assert res.returncode == 0, res.stdout[-4000:]
        assert not marker.exists()
        lines = [ln for ln in res.stdout.splitlines() if "not resumed" in ln]
        assert len(lines) == 1 and str(loader_state_path(ckpt2, 0)) in lines[0]
        assert "Traceback" not in res.stdout
        assert _keys(planted / "keys") == uninterrupted
