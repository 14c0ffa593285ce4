"""The WeNet recipe read once from ``dataset_conf``: execution, planning and the device
path agree on it (speed factors, lengths), and ``lhotse_conf`` keys reach the dataset
through every way of building it."""

from __future__ import annotations

import json

import pytest

from wenet_lhotse.features.recipe import CutLengths, FrameCounter
from wenet_lhotse.loader.build import build_dataloader
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
    from wenet_lhotse.features.recipe import cut_lengths_from_wenet_conf

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


_AUGMENTATIONS = {
    "speed_list": {"speed_perturb": [0.85, 1.0, 1.15]},
    "speed_wenet": {"speed_perturb": True},
    "spec_aug": {"spec_aug": True, "spec_aug_conf": {"num_t_mask": 3, "max_t": 30}},
    "spec_sub": {"spec_aug": False, "spec_sub": True},
    "spec_trim": {"spec_aug": False, "spec_trim": True, "spec_trim_conf": {"max_t": 40}},
    "all": {"speed_perturb": True, "spec_aug": True, "spec_sub": True, "spec_trim": True},
    "resample_8k": {"resample_conf": {"resample_rate": 8000}, "speed_perturb": True},
}
_FEATS = {
    "fbank": {"feats_type": "fbank", "fbank_conf": {"num_mel_bins": 23, "dither": 1.0}},
    "mfcc": {"feats_type": "mfcc", "mfcc_conf": {"num_mel_bins": 40, "frame_length": 32,
                                                 "frame_shift": 12}},
    "whisper": {"feats_type": "log_mel_spectrogram",
                "log_mel_spectrogram_conf": {"hop_length": 160, "padding": 37}},
}


@pytest.fixture(scope="module")
def random_cuts(tmp_path_factory):
    """Random noise of random lengths (0.05-3 s) at 16, 22.05 and 8 kHz, as real wavs."""
    import numpy as np
    import soundfile as sf
    from lhotse import Recording

    root = tmp_path_factory.mktemp("random_audio")
    rng = np.random.default_rng(19)
    cuts = []
    for i in range(24):
        sr = (16000, 22050, 8000)[i % 3]
        n = int(rng.integers(int(0.05 * sr), 3 * sr))
        path = root / f"r{i}.wav"
        sf.write(path, (rng.standard_normal(n) * 0.1).astype("float32"), sr, subtype="PCM_16")
        cuts.append(Recording.from_file(path, recording_id=f"r{i}").to_cut())
    return cuts


@pytest.mark.parametrize("feats", sorted(_FEATS))
@pytest.mark.parametrize("aug", sorted(_AUGMENTATIONS))
def test_planned_frames_equal_real_frames_for_every_augmentation(random_cuts, feats, aug):
    """The recipe's planned frames of a cut (what batching counts) are the frames the
    pipeline computes -- after resampling, speed perturbation and spec_trim -- and the
    frames the device path draws, on random lengths and rates, over two epochs."""
    from lhotse import CutSet

    from wenet_lhotse.features.device import plan_cut
    from wenet_lhotse.features.recipe import FeatureRecipe, cut_seed
    from wenet_lhotse.features.strategy import PooledFeatures

    conf = {**_FEATS[feats], **_AUGMENTATIONS[aug]}
    recipe = FeatureRecipe.from_wenet_conf(conf, augment=True)
    seed = 23
    planned = recipe.lengths(seed)
    features = PooledFeatures.from_recipe(recipe, seed=seed)
    cuts = CutSet.from_cuts(random_cuts)
    for epoch in (0, 1):
        planned.set_epoch(epoch)
        features.set_epoch(epoch)
        out = features(cuts, augment=True)
        real = dict(zip((c.id for c in out.cuts), out.feats_lens.tolist()))
        assert len(real) == len(random_cuts)
        for cut in random_cuts:
            assert planned.frames(cut) == real[cut.id], (cut.id, epoch)
            if feats != "whisper":  # the device path computes fbank/mfcc only
                _, draws = plan_cut(features.pipeline, cut, cut_seed(seed, epoch, cut.id), True)
                assert draws.keep == real[cut.id], (cut.id, epoch)
