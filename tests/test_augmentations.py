"""The feature augmentation registry (features/augmentations/): WeNet's order, WeNet's
settings and defaults, WeNet's output for the same random state, the config check
derived from it, and no module of the feature pipeline or the loader naming an
augmentation outside its own module (adding one is its module plus its registry line)."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import random
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from wenet_harness import import_wenet
from wenet_lhotse.features.augmentations import AUGMENTATIONS, BY_NAME
from wenet_lhotse.features.recipe import FeatureRecipe

ROOT = Path(__file__).resolve().parent.parent / "wenet_lhotse"
NAMES = [a.name for a in AUGMENTATIONS]


def test_registry_is_in_wenets_order_of_application(wenet_root):
    src = (wenet_root / "wenet" / "dataset" / "dataset.py").read_text(encoding="utf-8")
    applied = list(dict.fromkeys(re.findall(r"partial\(processor\.(spec_\w+)", src)))
    assert applied == NAMES


def test_settings_are_wenets_parameters_with_wenets_defaults(wenet_root):
    (processor,) = import_wenet("wenet.dataset.processor")
    for aug in AUGMENTATIONS:
        params = inspect.signature(getattr(processor, aug.name)).parameters
        wenet = {k: p.default for k, p in params.items() if k != "sample"}
        assert dataclasses.asdict(aug.config()) == wenet, aug.name
    # and WeNet's dataset.py turns on spec_aug only when dataset_conf is silent
    assert [a.name for a in AUGMENTATIONS if a.wenet_default] == ["spec_aug"]


_CONFS = {"spec_aug": {"num_t_mask": 3, "num_f_mask": 2, "max_t": 12, "max_f": 5},
          "spec_sub": {"max_t": 15, "num_t_sub": 4}, "spec_trim": {"max_t": 25}}


@pytest.mark.parametrize("name", NAMES)
def test_output_is_wenets_for_the_same_random_state(wenet_root, name):
    """WeNet's processor function with the global ``random`` seeded like our cut's
    ``random.Random``: the same matrix, for lengths around spec_trim's half-length rule."""
    (processor,) = import_wenet("wenet.dataset.processor")
    aug = BY_NAME[name]
    cfg = aug.config(**_CONFS[name])
    changed = 0
    for seed in range(20):
        frames = 20 + 7 * seed
        x = np.arange(frames * 16, dtype=np.float32).reshape(frames, 16) + 1.0
        random.seed(seed)
        want = getattr(processor, name)({"feat": torch.from_numpy(x.copy())},
                                        **_CONFS[name])["feat"].numpy()
        got = aug.run(x, random.Random(seed), cfg)
        assert got.shape == want.shape and np.array_equal(got, want), (name, seed)
        changed += not np.array_equal(got, x[: got.shape[0]]) or got.shape != x.shape
    assert changed >= 10  # the cases augment


def test_draws_frames_and_apply_batch_agree_with_apply():
    """One augmentation at a time: ``frames`` is the length ``apply`` returns, and
    ``apply_batch`` on zero-padded rows gives ``apply``'s rows (the device path)."""
    rng = np.random.default_rng(3)
    rows = [rng.random((n, 12), dtype=np.float32) + 1.0 for n in (5, 40, 77)]
    for aug in AUGMENTATIONS:
        cfg = aug.config()
        draws = [aug.draw(r.shape[0], r.shape[1], random.Random(i), cfg)
                 for i, r in enumerate(rows)]
        padded = torch.zeros((len(rows), 77, 12))
        for i, r in enumerate(rows):
            padded[i, : r.shape[0]] = torch.from_numpy(r)
        batch = aug.apply_batch(padded, draws)
        for i, (r, d) in enumerate(zip(rows, draws)):
            want = aug.apply(r, d)
            assert want.shape[0] == aug.frames(r.shape[0], d), aug.name
            assert np.array_equal(batch[i, : want.shape[0]].numpy(), want), (aug.name, i)


def test_config_check_comes_from_the_registry():
    from wenet_lhotse.loader.config_check import check_dataset_conf
    from wenet_lhotse.loader.schema import SCALARS, SECTIONS

    for aug in AUGMENTATIONS:
        assert aug.name in SCALARS
        assert set(SECTIONS[aug.conf_key]) == {f.name for f in dataclasses.fields(aug.config)}
    assert "expected an integer >= 1, got 0" in _error(check_dataset_conf,
                                                       {"spec_trim_conf": {"max_t": 0}})
    assert "expected an integer >= 0, got -1" in _error(check_dataset_conf,
                                                        {"spec_sub_conf": {"num_t_sub": -1}})


def _error(check, conf):
    from wenet_lhotse.errors import WenetConfigError

    with pytest.raises(WenetConfigError) as err:
        check(conf)
    return str(err.value)


def test_recipe_takes_one_keyword_per_augmentation():
    r = FeatureRecipe.build(spec_sub={"max_t": 7}, spec_trim=True)
    assert r.spec_aug is None and r.spec_sub.max_t == 7 and r.spec_trim.max_t == 20
    assert [a.name for a, _ in r.enabled()] == ["spec_sub", "spec_trim"]
    assert r.changes_frames() and not FeatureRecipe.build(spec_aug=True).changes_frames()
    with pytest.raises(TypeError, match="unknown augmentation 'spec_warp'"):
        FeatureRecipe.build(spec_warp=True)
    with pytest.raises(AttributeError):
        r.spec_warp  # noqa: B018


def _names_in_code(path: Path):
    """Identifiers, attributes, keywords and string constants of a module, docstrings
    left out."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) \
                and node.body and isinstance(node.body[0], ast.Expr) \
                and isinstance(node.body[0].value, ast.Constant):
            docstrings.add(id(node.body[0].value))
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            yield node.id
        elif isinstance(node, ast.Attribute):
            yield node.attr
        elif isinstance(node, ast.keyword) and node.arg:
            yield node.arg
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and id(node) not in docstrings:
            yield node.value


def test_no_module_but_its_own_names_an_augmentation():
    """The recipe, the pipeline, the device path, the strategy, the loader and the
    config schema iterate the registry: no code there names spec_aug & co. (the
    issue's count: spec_sub was spelled out in 7 modules)."""
    own = ROOT / "features" / "augmentations"
    watched = sorted(p for d in ("features", "loader") for p in (ROOT / d).rglob("*.py")
                     if own not in p.parents)
    assert len(watched) > 20
    words = {n for a in AUGMENTATIONS for n in (a.name, a.conf_key)}
    found = {str(p.relative_to(ROOT)): sorted(words & set(_names_in_code(p))) for p in watched}
    assert {k: v for k, v in found.items() if v} == {}
