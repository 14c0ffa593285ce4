"""Config checks: the keys come from WeNet's own source (dataset.py and the processor
functions each section is passed to), every WeNet recipe yaml passes, and every
problem is one WenetConfigError naming the yaml key."""

from __future__ import annotations

import ast
import glob
import inspect
import pickle
import typing
from collections import defaultdict
from pathlib import Path

import pytest

from wenet_lhotse.errors import WenetConfigError, WenetDataError
from wenet_lhotse.loader.config_check import (
    check_dataset_conf,
    check_special_tokens,
    lhotse_conf_rules,
    load_wenet_yaml,
)
from wenet_lhotse.loader.schema import SCALARS, SECTIONS

REPO = Path(__file__).resolve().parents[1]


def error(conf) -> str:
    with pytest.raises(WenetConfigError) as info:
        check_dataset_conf(conf)
    err = info.value
    again = pickle.loads(pickle.dumps(err))  # crosses DataLoader worker boundaries
    assert str(again) == str(err) and again.key == err.key
    assert "\n" not in str(err)
    return str(err)


def _wenet_dataset_keys(dataset_py: str):
    """What WeNet's Dataset() reads: top-level keys, the sub-keys read from each
    section, and the processor function each section is splatted into."""
    tree = ast.parse(dataset_py)

    def conf_get(node):
        return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "get" and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "conf" and node.args
                and isinstance(node.args[0], ast.Constant))

    top, var_section = set(), {}
    for node in ast.walk(tree):
        if conf_get(node):
            top.add(node.args[0].value)
        if isinstance(node, ast.Assign) and conf_get(node.value):
            for t in node.targets:
                var_section[t.id] = node.value.args[0].value
    sub, func = defaultdict(set), {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr == "get" and isinstance(node.func.value, ast.Name) \
                and node.func.value.id in var_section:
            sub[var_section[node.func.value.id]].add(node.args[0].value)
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) \
                and node.value.id in var_section and isinstance(node.slice, ast.Constant):
            sub[var_section[node.value.id]].add(node.slice.value)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id == "partial" and isinstance(node.args[0], ast.Attribute):
            for kw in node.keywords:
                if kw.arg is None and isinstance(kw.value, ast.Name) \
                        and kw.value.id in var_section:
                    func[var_section[kw.value.id]] = node.args[0].attr
    return top, sub, func


def test_keys_are_the_ones_wenet_reads(wenet_root):
    from wenet_harness import import_wenet

    src = (wenet_root / "wenet" / "dataset" / "dataset.py").read_text(encoding="utf-8")
    top, sub, func = _wenet_dataset_keys(src)
    assert len(top) > 20 and len(func) >= 10  # the parse found WeNet's pipeline
    # every key WeNet reads is known, and we know nothing WeNet does not read
    assert top - set(SECTIONS) - set(SCALARS) == set()
    assert (set(SECTIONS) | set(SCALARS)) - top == {"syncbn"}
    (processor,) = import_wenet("wenet.dataset.processor")
    for section, fn in func.items():
        params = set(inspect.signature(getattr(processor, fn)).parameters) - {"sample"}
        assert set(SECTIONS[section]) == params, (section, fn)
    for section, keys in sub.items():
        assert keys <= set(SECTIONS[section]), section
    # the sections read key by key are exactly those without a processor function
    assert set(SECTIONS) == set(func) | set(sub)


YAMLS = sorted(glob.glob(str(REPO / "recipes" / "*" / "conf" / "*.yaml")))


@pytest.mark.parametrize("path", YAMLS, ids=lambda p: Path(p).name)
def test_our_recipe_yamls_pass(path):
    load_wenet_yaml(path)


def test_every_wenet_recipe_yaml_passes(wenet_root):
    paths = sorted((wenet_root / "examples").glob("*/s0/conf/*.yaml"))
    assert len(paths) > 20
    for p in paths:
        load_wenet_yaml(p)


def _typo(key: str) -> str:
    return key + key[-1]


@pytest.mark.parametrize("section", sorted(SECTIONS))
def test_every_section_names_an_unknown_key_and_a_bad_value(section):
    for key in SECTIONS[section]:
        msg = error({section: {_typo(key): 1}})
        assert msg == f"dataset_conf.{section}.{_typo(key)}: unknown key; did you mean {key}?"
        if key != "speaker_table_path":  # the only free-text value
            msg = error({section: {key: "oops"}})
            assert msg.startswith(f"dataset_conf.{section}.{key}: expected ")
            assert msg.endswith(", got 'oops'")
    assert error({section: [1]}).startswith(f"dataset_conf.{section}: expected a mapping")


def test_examples_from_the_issue():
    assert error({"batch_conf": {"batch_sise": 8}}) == \
        "dataset_conf.batch_conf.batch_sise: unknown key; did you mean batch_size?"
    assert error({"lhotse_conf": {"fault_tolerant": "false"}}) == \
        "dataset_conf.lhotse_conf.fault_tolerant: expected a boolean, got 'false'"
    assert error({"lhotse_conf": {"num_buckets": "5"}}) == \
        "dataset_conf.lhotse_conf.num_buckets: expected an integer >= 1, got '5'"
    assert error({"batch_conf": {"batch_type": "dynamic", "max_frames_in_batch": 0}}) == \
        "dataset_conf.batch_conf.max_frames_in_batch: expected an integer >= 1, got 0"
    assert error({"shufle": True}) == "dataset_conf.shufle: unknown key; did you mean shuffle?"
    assert error({"spec_aug": "true"}) == "dataset_conf.spec_aug: expected a boolean, got 'true'"
    assert error({"zzz": 1}).startswith("dataset_conf.zzz: unknown key; known keys: batch_conf,")
    assert error({"batch_conf": {"batch_type": "bucket", "bucket_boundaries": [500],
                                 "bucket_batch_sizes": [8]}}) == \
        ("dataset_conf.batch_conf.bucket_batch_sizes: needs len(bucket_boundaries) + 1 = 2 "
         "sizes, got 1")
    assert error({"batch_conf": {"batch_type": "bucket", "bucket_batch_sizes": [8]}}) == \
        "dataset_conf.batch_conf.bucket_boundaries: required with batch_type: bucket"
    assert error({"speaker_conf": {}}) == "dataset_conf.speaker_conf.speaker_table_path: required"
    check_dataset_conf({"speed_perturb": [0.9, 1.0, 1.1], "lhotse_conf": None,
                        "fbank_conf": {"dither": 0, "frame_shift": 12.5}})


def test_every_lhotse_conf_key_is_checked():
    from wenet_lhotse.loader.lhotse_conf import LhotseConf

    rules = lhotse_conf_rules()
    assert set(rules) == {f for f in LhotseConf.__dataclass_fields__}
    defaults = LhotseConf()
    check_dataset_conf({"lhotse_conf": {k: getattr(defaults, k) for k in rules}})
    assert error({"lhotse_conf": {"num_bucket": 5}}) == \
        "dataset_conf.lhotse_conf.num_bucket: unknown key; did you mean num_buckets?"
    assert error({"lhotse_conf": {"mode": "mapp"}}) == \
        "dataset_conf.lhotse_conf.mode: expected one of auto, map, streamed, got 'mapp'"
    hints = typing.get_type_hints(LhotseConf)
    for key in rules:
        if hints[key] is bool:
            assert error({"lhotse_conf": {key: "yes"}}).endswith("expected a boolean, got 'yes'")
    check_dataset_conf({"lhotse_conf": {"probe_cache": "/tmp/probe-cache"}})


def test_yaml_file_errors(tmp_path):
    p = tmp_path / "train.yaml"
    p.write_text("dataset_conf:\n  sort_conf: {sort_sise: 500}\n")
    with pytest.raises(WenetConfigError, match=r"train.yaml: dataset_conf.sort_conf.sort_sise: "
                                               r"unknown key; did you mean sort_size\?"):
        load_wenet_yaml(p)
    p.write_text("dataset_conf: [\n")
    with pytest.raises(WenetDataError, match=r"train.yaml:2: not valid yaml"):
        load_wenet_yaml(p)
    with pytest.raises(WenetDataError, match="no such file"):
        load_wenet_yaml(tmp_path / "nope.yaml")


SPECIAL = {"<blank>": 0, "<unk>": 1, "<sos>": 2, "<eos>": 2}


def _table(tmp_path, units, name="units.txt"):
    p = tmp_path / name
    p.parent.mkdir(exist_ok=True)
    p.write_text("".join(f"{u} {i}\n" for i, u in enumerate(units)), encoding="utf-8")
    return p


def test_special_tokens_against_the_symbol_table(tmp_path):
    current = _table(tmp_path, ["<blank>", "<unk>", "<sos/eos>", "a", "b"])
    check_special_tokens(current, SPECIAL)
    with pytest.raises(WenetConfigError) as info:  # yaml without special_tokens
        check_special_tokens(current, None)
    assert str(info.value) == (
        "tokenizer_conf.special_tokens: not set, so WeNet uses vocab_size - 1 = 4 as <sos>, "
        "but units.txt line 5 maps id 4 to 'b' (the table has <sos/eos> 2)")
    old = _table(tmp_path / "old", ["<blank>", "<unk>", "a", "b", "<sos/eos>"])
    check_special_tokens(old, None)
    with pytest.raises(WenetConfigError) as info:
        check_special_tokens(old, SPECIAL, source="train.yaml")
    assert str(info.value) == ("train.yaml: tokenizer_conf.special_tokens.<sos>: 2, but "
                               "units.txt line 3 maps id 2 to 'a' (the table has <sos/eos> 4)")
    with pytest.raises(WenetConfigError, match=r"special_tokens.<blank>: 1, but units.txt "
                                                r"line 2 maps id 1 to '<unk>'"):
        check_special_tokens(current, {**SPECIAL, "<blank>": 1})
    with pytest.raises(WenetConfigError, match=r"<eos>: 9, but units.txt has no id 9"):
        check_special_tokens(current, {**SPECIAL, "<eos>": 9})
    # Whisper-style keys are not ours to check; a broken table names its line
    check_special_tokens(current, {**SPECIAL, "sot": 50258})
    bad = tmp_path / "bad.txt"
    bad.write_text("<blank> 0\n<unk>\n")
    with pytest.raises(WenetDataError, match=r"bad.txt:2"):
        check_special_tokens(bad, SPECIAL)


def _drop_in(configs, data_list):
    from types import SimpleNamespace

    from wenet_lhotse.dropin.compat import init_dataset_and_dataloader
    from wenet_lhotse.text import CharTokenizer

    args = SimpleNamespace(train_data=[str(data_list)], cv_data=str(data_list),
                           data_type="raw", num_workers=0, pin_memory=False, prefetch=2)
    tok = CharTokenizer(configs["tokenizer_conf"]["symbol_table_path"])
    return init_dataset_and_dataloader(args, configs, tok)


def test_drop_in_stops_at_start_up(corpus, tmp_path):
    """WeNet's init_dataset_and_dataloader signature: a typo or a symbol table that
    disagrees with special_tokens stops before any data is read."""
    units = str(corpus.units)  # WeNet's current layout: <sos/eos> 2
    configs = {"tokenizer": "char", "dataset_conf": {"batch_conf": {"batch_sise": 4}},
               "tokenizer_conf": {"symbol_table_path": units, "special_tokens": SPECIAL}}
    with pytest.raises(WenetConfigError, match=r"^dataset_conf.batch_conf.batch_sise: "
                                                r"unknown key; did you mean batch_size\?$"):
        _drop_in(configs, corpus.data_list)
    old = _table(tmp_path, [line.split()[0] for line in corpus.units.read_text().splitlines()
                            if not line.startswith("<sos/eos>")] + ["<sos/eos>"])
    configs = {"tokenizer": "char", "dataset_conf": {"batch_conf": {"batch_size": 4}},
               "tokenizer_conf": {"symbol_table_path": str(old), "special_tokens": SPECIAL}}
    with pytest.raises(WenetConfigError, match=r"special_tokens.<sos>: 2, but units.txt line 3 "
                                                r"maps id 2 to 'a'"):
        _drop_in(configs, corpus.data_list)
    del configs["tokenizer_conf"]["special_tokens"]  # old table, old yaml: fine
    _, _, train_dl, _ = _drop_in(configs, corpus.data_list)
    assert next(iter(train_dl))["keys"]


def test_build_dataloader_stops_at_start_up(corpus, tmp_path):
    from wenet_lhotse.loader import build_dataloader
    from wenet_lhotse.text import CharTokenizer

    tok = CharTokenizer(corpus.units)
    with pytest.raises(WenetConfigError, match=r"^dataset_conf.fbank_conf.num_mel_bin: "
                                                r"unknown key; did you mean num_mel_bins\?$"):
        build_dataloader(corpus.data_list, tok, {"fbank_conf": {"num_mel_bin": 80}})
    old = _table(tmp_path, ["<blank>", "<unk>", "a", "<sos/eos>"])
    with pytest.raises(WenetConfigError, match=r"<sos>: 2, but units.txt line 3 maps id 2 to "
                                                r"'a' \(the table has <sos/eos> 3\)"):
        build_dataloader(corpus.data_list, CharTokenizer(old), {}, special_tokens=SPECIAL)
    _, loader = build_dataloader(corpus.data_list, tok, {"batch_conf": {"batch_size": 4}},
                                 "cv", special_tokens=SPECIAL)
    assert next(iter(loader))["keys"]
