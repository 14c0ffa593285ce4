"""Every ``dataset_conf`` of WeNet's example yamls (``$WENET_ROOT/examples/*/*/conf``, 67 at
the pinned snapshot) is accepted by the drop-in's start-up checks and builds its loader
configuration and dataset, for training and cv; the keys WeNet ignores
(``split_with_space``) are accepted and noted once in the log."""

from __future__ import annotations

import logging

import pytest
import yaml

from wenet_lhotse.loader import config_check
from wenet_lhotse.loader.config import LoaderConfig
from wenet_lhotse.loader.config_check import IGNORED, check_dataset_conf, load_wenet_yaml
from wenet_lhotse.loader.wenet_dataset import make_wenet_dataset
from wenet_lhotse.text.tokenizer import CharTokenizer


def _example_yamls(wenet_root):
    paths = sorted((wenet_root / "examples").glob("*/*/conf/*.yaml"))
    assert len(paths) >= 60, f"only {len(paths)} example yamls under {wenet_root}"
    return paths


def test_every_wenet_example_yaml_is_accepted(wenet_root):
    tok = CharTokenizer({"<blank>": 0, "<unk>": 1, "a": 2, "<sos/eos>": 3})
    checked = 0
    for path in _example_yamls(wenet_root):
        configs = load_wenet_yaml(path)  # raises WenetConfigError naming the key
        dataset_conf = configs.get("dataset_conf")
        if dataset_conf is None:
            continue
        for split in ("train", "cv"):
            cfg = LoaderConfig.from_wenet(dataset_conf, split)
            assert make_wenet_dataset(tok, cfg.dataset_conf, split) is not None
        checked += 1
    assert checked >= 60


def test_keys_wenet_ignores_are_accepted_and_noted_once(wenet_root, caplog, monkeypatch):
    with_key = [p for p in _example_yamls(wenet_root)
                if "split_with_space" in (yaml.safe_load(p.read_text(encoding="utf-8"))
                                          .get("dataset_conf") or {})]
    assert len(with_key) >= 2  # chime4, commonvoice/fr, timit (2) at the pinned snapshot
    monkeypatch.setattr(config_check, "_NOTED", set())
    with caplog.at_level(logging.INFO, logger="wenet_lhotse.loader.config_check"):
        for p in with_key:
            load_wenet_yaml(p)
        check_dataset_conf({"split_with_space": True})
    notes = [r.getMessage() for r in caplog.records if "split_with_space" in r.getMessage()]
    assert len(notes) == 1
    assert "dataset_conf.split_with_space: ignored, as WeNet ignores it" in notes[0]
    assert set(IGNORED) == {"split_with_space"}


def test_a_typo_next_to_an_ignored_key_still_stops():
    from wenet_lhotse.errors import WenetConfigError

    with pytest.raises(WenetConfigError, match="dataset_conf.split_with_spaces: unknown key"):
        check_dataset_conf({"split_with_space": False, "split_with_spaces": False})
