"""The WeNet harness itself: WeNet's own data pipeline and tokenizer run here.

Everything below is WeNet's code from ``$WENET_ROOT`` (torchaudio I/O and deepspeed
stood in, see wenet_harness/README.md); nothing of wenet-lhotse is involved
except the generated corpus.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from wenet_harness import STUBBED, import_wenet, wenet_env


@pytest.fixture(scope="module")
def wenet_mods(wenet_root):
    dataset, init_tokenizer = import_wenet("wenet.dataset.dataset", "wenet.utils.init_tokenizer")
    return dataset, init_tokenizer


def test_import_wenet_leaves_no_stand_in_behind(wenet_mods):
    import importlib.util

    for name in STUBBED:  # Lhotse asks find_spec("torchaudio"): it must stay "absent"
        assert importlib.util.find_spec(name) is None, name
    assert wenet_mods[0].processor.torchaudio.__version__.endswith("standin")


def test_wenet_dataset_reads_a_generated_corpus(wenet_mods, corpus, tmp_path):
    dataset_mod, init_tokenizer_mod = wenet_mods
    # The corpus' lines carry "speaker": WeNet then needs speaker_conf (without it its
    # padding() fails on the string); the table maps S000.. to 0..
    spk = tmp_path / "spk.txt"
    spk.write_text("".join(f"S{i:03d} {i}\n" for i in range(4)))
    configs = {"tokenizer": "char",
               "tokenizer_conf": {"symbol_table_path": str(corpus.units),
                                  "non_lang_syms_path": None, "split_with_space": False}}
    tokenizer = init_tokenizer_mod.init_tokenizer(configs)
    assert type(tokenizer).__name__ == "CharTokenizer"
    assert tokenizer.vocab_size() == len(corpus.units.read_text().splitlines())
    conf = {"fbank_conf": {"num_mel_bins": 40, "dither": 0.0}, "spec_aug": False,
            "shuffle": False, "sort": False, "list_shuffle": False,
            "speaker_conf": {"speaker_table_path": str(spk)},
            "batch_conf": {"batch_type": "static", "batch_size": 4}}
    ds = dataset_mod.Dataset("raw", str(corpus.data_list), tokenizer, conf, partition=False)
    batches = list(ds)
    # list order in groups of 4; WeNet's padding() sorts each batch longest first
    assert [sorted(b["keys"]) for b in batches] == \
        [sorted(corpus.keys[i:i + 4]) for i in range(0, len(corpus.keys), 4)]
    b = batches[0]
    assert b["feats"].shape[0] == 4 and b["feats"].shape[2] == 40
    assert b["feats"].dtype == torch.float32
    assert int(b["target_lengths"][0]) > 0
    assert set(b["langs"]) <= {"zh", "en"}  # WeNet's langid, limited_langs default
    assert b["pcm"].shape[0] == 4
    assert sorted(b["speaker"].tolist()) == [0, 1, 2, 3]


def test_wenet_train_py_parses_its_arguments_in_a_subprocess(wenet_root, tmp_path):
    # The full import chain of train.py (every model, deepspeed/torchaudio stand-ins,
    # torch 2.13 shim via sitecustomize) in a fresh interpreter.
    res = subprocess.run([sys.executable, "-m", "wenet.bin.train", "--help"],
                         env=wenet_env(), capture_output=True, text=True, timeout=300,
                         cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "--train_data" in res.stdout and "--deepspeed_config" in res.stdout


def test_sox_effects_have_sox_length_and_pitch_as_ours(wenet_root):
    """The harness's ``sox_effects`` (WeNet's speed perturbation; libsox itself where
    soxbindings is installed) emits sox's ``floor(n / s + 0.5)`` samples, as our
    ``speed_perturb`` does; torchaudio's resampler alone would give ``ceil(n / s)``."""
    import math

    from wenet_lhotse.features.augment import speed_perturb

    (processor,) = import_wenet("wenet.dataset.processor")
    sox_effects = processor.torchaudio.sox_effects
    ceil_differs = 0
    for n in (16000, 16001, 16005, 33333, 48007):
        wave = torch.randn(1, n)
        for s in ("0.9", "1.1"):
            out, sr = sox_effects.apply_effects_tensor(wave, 16000, [["speed", s],
                                                                     ["rate", "16000"]])
            want = math.floor(n / float(s) + 0.5)
            assert sr == 16000 and out.shape == (1, want), (n, s)
            assert speed_perturb(wave[0].numpy(), 16000, float(s)).shape == (want,)
            ceil_differs += math.ceil(n / float(s)) != want
    assert ceil_differs  # the lengths tried include ones where ceil would be wrong
    # the same tempo and pitch change: a 440 Hz tone comes out at 440 * s Hz from both
    # (through libsox itself where soxbindings is installed, see sox_effects.BACKEND)
    t = torch.arange(32000) / 16000
    tone = 0.5 * torch.sin(2 * math.pi * 440 * t)
    for s in ("0.9", "1.1"):
        theirs = sox_effects.apply_effects_tensor(tone[None], 16000, [["speed", s],
                                                                      ["rate", "16000"]])[0][0]
        ours = torch.as_tensor(speed_perturb(tone.numpy(), 16000, float(s)))
        peaks = [float(torch.fft.rfft(x[2000:-2000]).abs().argmax()) * 16000 / (len(x) - 4000)
                 for x in (theirs, ours)]
        assert all(abs(p - 440 * float(s)) < 2 for p in peaks), (s, peaks)
        assert torch.corrcoef(torch.stack((theirs, ours)))[0, 1] > 0.99, s


def test_harness_is_shared_but_not_shipped():
    """The harness is importable from the repository root (tests: pytest's ``pythonpath``;
    bench: ``bench/_paths.py``), and pyproject's package list leaves it out of the wheel."""
    import ast
    import re
    from pathlib import Path

    import setuptools

    import wenet_harness

    repo = Path(__file__).resolve().parents[1]
    assert Path(wenet_harness.__file__).resolve().parent == repo / "wenet_harness"
    pyproject = (repo / "pyproject.toml").read_text(encoding="utf-8")  # no tomllib on 3.9
    find = pyproject.split("[tool.setuptools.packages.find]", 1)[1]
    include = ast.literal_eval(re.search(r"^include = (\[.*\])$", find, re.M).group(1))
    shipped = setuptools.find_packages(str(repo), include=include)
    assert "wenet_lhotse" in shipped and not [p for p in shipped if "harness" in p], shipped
    assert re.search(r'^pythonpath = \["\."\]$', pyproject, re.M)
    assert not [f.name for f in (repo / "bench").glob("*.py")
                if "sys.path.insert" in f.read_text(encoding="utf-8")]


def test_langid_cache_builds_the_identifier_langid_builds(tmp_path, monkeypatch):
    """``stubs/wenet_shims.py`` keeps langid's decoded model (the 2.5-4 s WeNet's
    processor.py spends at import) as arrays + JSON: the identifier built from the cache
    has langid's own arrays, typecodes, classes and automaton and classifies alike; a
    planted cache file (a pickled object array) runs nothing and is rebuilt."""
    import importlib

    import numpy as np
    from langid.langid import LanguageIdentifier, model

    from wenet_harness import STUBS

    monkeypatch.setenv("WENET_HARNESS_CACHE", str(tmp_path))
    monkeypatch.syspath_prepend(str(STUBS))
    shims = importlib.import_module("wenet_shims")
    ref = shims._langid_original.__func__(LanguageIdentifier, model, norm_probs=True)
    built = LanguageIdentifier.from_modelstring(model, norm_probs=True)  # writes the cache
    (npz,) = tmp_path.glob("langid-*.npz")
    cached = LanguageIdentifier.from_modelstring(model, norm_probs=True)
    for ident in (built, cached):
        for name in ("nb_ptc", "nb_pc"):
            a, b = getattr(ident, name), getattr(ref, name)
            assert a.dtype == b.dtype and np.array_equal(a, b), name
        assert ident.nb_numfeats == ref.nb_numfeats and ident.nb_classes == ref.nb_classes
        assert ident.tk_nextmove.typecode == ref.tk_nextmove.typecode
        assert ident.tk_nextmove == ref.tk_nextmove and ident.tk_output == ref.tk_output
        for text in ("hello world, this is english", "这是一个测试", "ceci est une phrase"):
            assert ident.classify(text) == ref.classify(text)
    marker = tmp_path / "PWNED"
    np.savez(npz, nb_ptc=np.array([_Payload(marker)], dtype=object))
    again = LanguageIdentifier.from_modelstring(model, norm_probs=True)
    assert not marker.exists() and np.array_equal(again.nb_ptc, ref.nb_ptc)
    with np.load(npz, allow_pickle=False) as z:  # rebuilt
        assert np.array_equal(z["nb_ptc"], ref.nb_ptc)


class _Payload:
    def __init__(self, marker) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        import os

        return (os.system, (f"touch {self.marker}",))
