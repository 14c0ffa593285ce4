"""loader.build: build_dataloader end to end: tags, batch sizes, cv plans, WeNet's
defaults, fault-tolerant skips."""

from __future__ import annotations

from collections import Counter

import pytest
from loader_common import CONF, Keys, _epoch

from wenet_lhotse.loader.build import build_dataloader
from wenet_lhotse.loader.distributed import reduce_cv_loss


def test_tags_reach_batches(data):
    specs = [{"path": str(data["manifest"]), "tags": {"lang": "zh"}},
             {"path": str(data["raw"]), "type": "raw", "tags": {"lang": "en"}, "weight": 2}]
    _, loader = build_dataloader(specs, None, CONF, "train", dataset=Keys(), seed=0)
    langs = Counter(lang for b in loader for _, lang in b)
    assert langs == {"zh": 20, "en": 20}


def test_static_batches_hold_batch_size_cuts(data):
    conf = {"batch_conf": {"batch_type": "static", "batch_size": 4},
            "lhotse_conf": {"num_buckets": 2, "buffer_size": 40}}
    _, loader = build_dataloader(str(data["manifest"]), None, conf, "train", dataset=Keys())
    for _ in range(2):
        sizes = [len(b) for b in loader]
        assert sizes[:-1] == [4] * (len(sizes) - 1) and len(sizes) == -(-20 // 4)


def test_static_batches_by_duration_hold_about_batch_size_cuts(data):
    conf = {"batch_conf": {"batch_type": "static", "batch_size": 4},
            "lhotse_conf": {"num_buckets": 2, "buffer_size": 40, "batch_by": "duration"}}
    _, loader = build_dataloader(str(data["manifest"]), None, conf, "train", dataset=Keys())
    sizes = [len(b) for b in loader]
    assert 2.5 <= sum(sizes) / len(sizes) <= 5.5


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
