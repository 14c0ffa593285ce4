"""The package as users and contributors meet it: the public API, packaging, and the
layer rule of docs/architecture.md."""

from __future__ import annotations

import ast
import subprocess
import sys
import warnings
from pathlib import Path

import wenet_lhotse

ROOT = Path(wenet_lhotse.__file__).parent

#: Every public name ``wenet_lhotse`` has offered; a name may move, never disappear.
PUBLIC = {
    "BpeTokenizer", "CharTokenizer", "CorpusPaths", "CorpusStats", "DataWaitMeter",
    "FilterConf", "IGNORE_ID", "ImportResult", "LazyWenetRawListIterator",
    "LazyWenetShardIterator", "LhotseConf", "LhotseDataLoader", "LoaderConfig",
    "PooledFeatures", "ResumableBucketingSampler", "SharConversion", "SkipReport",
    "SkippedItem", "SourceSpec", "SpecAugConfig", "SpecSubConfig", "SpecTrimConfig",
    "ValidationResult", "WenetAsrDataset", "WenetDataError", "WenetFbank", "WenetFbankConfig",
    "WenetMfcc", "WenetMfccConfig", "WhisperLogMel", "WhisperLogMelConfig", "build_dataloader",
    "corpus_stats", "detect_data_type", "export_raw_list", "export_shards",
    "extractor_from_wenet_conf", "filter_reason", "filter_stats", "generate_corpus",
    "import_raw", "init_dataset_and_dataloader", "kaldi_dir_to_raw_list", "make_wenet_dataset",
    "mux_sources", "open_cuts", "open_source", "plot_stats", "read_raw_list", "read_shar",
    "read_shard_list", "read_symbol_table", "read_wenet_list", "reduce_cv_loss",
    "tokenizer_from_wenet_conf", "train_bpe_units", "wenet_filter", "wenet_to_shar",
    "world_info", "write_char_units", "write_raw_list", "write_wenet_shards",
}

#: Layers, bottom up: a module imports only from its own layer or those below.
LAYERS = {"errors": 0, "io": 1, "formats": 2, "sources": 3, "text": 4, "features": 4,
          "dataset": 4, "convert": 4, "loader": 5, "dropin": 6}
TOP = 7  # cli, demo, corpus, __main__
#: Side by side, never importing each other: training input and the conversion tools.
APART = {("loader", "convert"), ("convert", "loader")}

def test_public_api_resolves_and_import_is_light():
    assert PUBLIC <= set(wenet_lhotse.__all__), PUBLIC - set(wenet_lhotse.__all__)
    for name in wenet_lhotse.__all__:
        assert getattr(wenet_lhotse, name) is not None, name
    # `import wenet_lhotse` must not pull in optional packages or the heavy submodules
    code = ("import sys, wenet_lhotse; "
            "bad = [m for m in ('torchaudio', 'sentencepiece', 'matplotlib', 'lhotse') "
            "if m in sys.modules]; print(bad); sys.exit(1 if bad else 0)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_every_subpackage_is_a_regular_package():
    """A directory of modules without __init__.py is left out of a (non-editable) wheel."""
    missing = [str(d.relative_to(ROOT)) for d in ROOT.rglob("*")
               if d.is_dir() and any(d.glob("*.py")) and not (d / "__init__.py").exists()]
    assert not missing, missing


def _layer(module: str) -> int:
    parts = module.split(".")
    return LAYERS.get(parts[1], TOP) if len(parts) > 1 else TOP


def _imports():
    """``(importing module, imported module)`` for every ``from wenet_lhotse... import``,
    function-level imports included."""
    for path in ROOT.rglob("*.py"):
        module = ".".join(path.relative_to(ROOT.parent).with_suffix("").parts)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("wenet_lhotse"):
                yield module, node.module


def test_no_module_imports_from_a_higher_layer():
    def part(module: str) -> str:
        return module.split(".")[1] if "." in module else ""

    upward = sorted({(m, t) for m, t in _imports()
                     if not m.endswith("__init__") and _layer(t) > _layer(m)})
    assert not upward, upward
    sideways = sorted({(m, t) for m, t in _imports() if (part(m), part(t)) in APART})
    assert not sideways, sideways


def _module_names() -> set:
    out = set()
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        out.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return out


def test_no_import_cycles():
    """Module-level and function-level imports together form no cycle (``from pkg import
    submodule`` counts as an import of the submodule, not of the package)."""
    modules = _module_names()
    graph = {m: set() for m in modules}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        me = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("wenet_lhotse"):
                for alias in node.names:
                    sub = f"{node.module}.{alias.name}"
                    graph[me].add(sub if sub in modules else node.module)
    state: dict = {}

    def visit(m, stack):
        state[m] = "open"
        for n in graph.get(m, ()):
            if n == m:
                continue
            if state.get(n) == "open":
                raise AssertionError(" -> ".join(stack[stack.index(n):] + [n]))
            if n not in state:
                visit(n, stack + [n])
        state[m] = "done"

    for m in sorted(modules):
        if m not in state:
            visit(m, [m])


#: Small modules with one idea each: a guideline, not a rule (lines). A cohesive module
#: above it is reported, never split just to pass (issue 28).
MODULE_LINES_GUIDELINE = 400


def test_modules_above_the_line_guideline_are_reported():
    long = {str(p.relative_to(ROOT)): n for p in sorted(ROOT.rglob("*.py"))
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MODULE_LINES_GUIDELINE}
    if long:
        warnings.warn(f"modules above the {MODULE_LINES_GUIDELINE}-line guideline: "
                      + ", ".join(f"{m} ({n})" for m, n in sorted(long.items())), stacklevel=1)
