"""The WeNet recipe read once from ``dataset_conf``: execution, planning and the device
path agree on it (speed factors, lengths), and ``lhotse_conf`` keys reach the dataset
through every way of building it."""

from __future__ import annotations

import json

import pytest

from wenet_lhotse.loader.build import build_dataloader
from wenet_lhotse.loader.lengths import CutLengths, FrameCounter
from wenet_lhotse.text import CharTokenizer

SPEEDS = (0.8, 1.25)  # not WeNet's 0.9/1.0/1.1: a list silently replaced shows


def _conf(**extra):
    return {"speed_perturb": list(SPEEDS), "spec_aug": False, "fbank_conf": {"num_mel_bins": 23},
            "batch_conf": {"batch_type": "static", "batch_size": 4},
            "lhotse_conf": {"num_buckets": 1, **extra}}


@pytest.mark.parametrize("features_on", ["worker", "device"])
def test_speed_perturb_list_is_honoured_everywhere(corpus, features_on):
    """``speed_perturb: [0.8, 1.25]`` (config_check accepts a list of factors) is used by
    the features (worker and device path) and by the planned lengths, not replaced by
    WeNet's 0.9/1.0/1.1."""
    tok = CharTokenizer(corpus.units)
    extra = {"features_on": features_on, "device": "cpu"} if features_on == "device" else {}
    dataset, loader = build_dataloader(str(corpus.data_list), tok, _conf(**extra), "train",
                                       seed=5)
    assert dataset.features.pipeline.speeds == SPEEDS
    counter = FrameCounter.from_wenet_conf(_conf())
    planned = CutLengths(counter, SPEEDS, seed=5)  # the planning side, epoch 0
    from wenet_lhotse.formats import read_raw_list

    cuts = {c.id: c for c in read_raw_list(corpus.data_list)}
    seen = set()
    for batch in loader:  # the loader's first epoch is epoch 0
        for key, n in zip(batch["keys"], batch["feats_lengths"].tolist()):
            assert n == planned.frames(cuts[key]), key
            seen.add(planned.speed(cuts[key]))
    assert seen == set(SPEEDS)


def test_planned_lengths_use_the_speed_list():
    from wenet_lhotse.loader.lengths import cut_lengths_from_wenet_conf

    assert cut_lengths_from_wenet_conf(_conf(), train=True, seed=0).speeds == SPEEDS
    assert cut_lengths_from_wenet_conf({"speed_perturb": True}, train=True, seed=0).speeds \
        == (0.9, 1.0, 1.1)
    assert cut_lengths_from_wenet_conf(_conf(), train=False, seed=0).speeds is None


@pytest.mark.parametrize("lang_from_data", [None, False, True])
def test_lang_from_data_reaches_build_dataloader(corpus, tmp_path, lang_from_data):
    """``lhotse_conf.lang_from_data`` (default false, as WeNet) decides ``langs`` through
    ``build_dataloader`` too, not only through the drop-in."""
    lines = []
    for line in corpus.data_list.read_text(encoding="utf-8").splitlines()[:4]:
        item = json.loads(line)
        item["lang"] = "fr"  # the data's own language
        lines.append(json.dumps(item, ensure_ascii=False))
    data = tmp_path / "data.list"
    data.write_text("\n".join(lines) + "\n", encoding="utf-8")
    extra = {} if lang_from_data is None else {"lang_from_data": lang_from_data}
    conf = {"batch_conf": {"batch_type": "static", "batch_size": 4},
            "lhotse_conf": {"num_buckets": 1, **extra}}
    dataset, loader = build_dataloader(str(data), CharTokenizer(corpus.units), conf, "cv")
    langs = {lang for batch in loader for lang in batch["langs"]}
    assert dataset.lang_from_data is bool(lang_from_data)
    assert langs == ({"fr"} if lang_from_data else {"zh"})
