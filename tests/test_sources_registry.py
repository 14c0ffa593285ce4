"""The registry of input kinds (wenet_lhotse.sources.registry) is the one place kinds
are known: the old tables derive from it, detection follows its order, and no module
outside sources/kinds and the registry compares a kind's name to a string."""

from __future__ import annotations

import ast
import gzip
import json
from pathlib import Path

import pytest

import wenet_lhotse
from wenet_lhotse.errors import WenetDataError
from wenet_lhotse.sources import KINDS, SOURCE_TYPES, SourceSpec, detect_input_kind
from wenet_lhotse.sources.detect import TAR_LIST_KINDS, WENET_KINDS
from wenet_lhotse.sources.registry import KIND_MODULES, detect, get_kind, kinds

ROOT = Path(wenet_lhotse.__file__).parent

#: Comparisons with a kind's name that are about something else, with why.
NOT_KINDS = {
    ("sources/parquet.py", 'kind == "parquet"'): "file format: Parquet vs Arrow",
    ("sources/shar_audio.py", 'cut.recording.sources[0].type != "shar"'):
        "Lhotse AudioSource type",
    ("sources/shar_dir.py", '"cuts" not in found'): "a Shar field's name",
    ("sources/shar_stream.py", 'set(fields) == {"cuts", "recording"}'): "Shar field names",
    ("sources/spec.py", '"cuts" not in self.fields'): "a Shar field's name",
    ("sources/kinds/shar.py", 'f != "cuts"'): "a Shar field's name",
}
#: Modules still switching on kind names (none left: the tools ask the kinds too).
PENDING: set = set()


def _strings(node: ast.AST) -> set:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return set().union(set(), *(_strings(e) for e in node.elts))
    return set()


def test_no_module_outside_the_registry_compares_kind_names():
    names = {k.name for k in kinds()}
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("sources/kinds/") or rel == "sources/registry.py":
            continue
        source = path.read_text(encoding="utf-8")
        for node in ast.walk(ast.parse(source)):
            if not isinstance(node, ast.Compare):
                continue
            if not set().union(*(_strings(x) for x in [node.left, *node.comparators])) & names:
                continue
            text = ast.get_source_segment(source, node)
            if (rel, text) not in NOT_KINDS and rel not in PENDING:
                found.append(f"{rel}:{node.lineno}: {text}")
    assert not found, "ask the registry (get_kind(name).<flag>) instead:\n" + "\n".join(found)


def test_the_old_tables_are_the_registry_by_flag():
    assert tuple(KIND_MODULES) == tuple(k.name for k in kinds())
    assert KINDS == {k.name: k.description for k in kinds() if k.detected}
    assert list(KINDS)[:4] == ["raw", "shard", "cuts", "shar"]
    assert WENET_KINDS == ("raw", "shard") and TAR_LIST_KINDS == ("shard",)
    assert SOURCE_TYPES == (*KINDS, "auto", "text")
    assert get_kind("shar").late_audio and get_kind("shard").indexable
    assert get_kind("text").text_only and not get_kind("text").detected
    with pytest.raises(ValueError, match="kind must be one of .* got 'tsv'"):
        get_kind("tsv")


@pytest.mark.parametrize("first,kind", [
    ({"key": "a", "wav": "a.wav"}, "raw"),            # raw: sure
    ({"id": "a", "start": 0}, "cuts"),                # cuts: sure
    ({"id": "a", "key": "a"}, "raw"),                 # a key makes it WeNet's
    ({"wav": "a.wav"}, "raw"),                        # JSON no one is sure of: raw's fallback
])
def test_detection_sure_beats_fallback(tmp_path, first, kind):
    path = tmp_path / "list"
    path.write_text(json.dumps(first) + "\n")
    assert detect(path) == kind == detect_input_kind(path)


def test_detection_of_the_other_shapes(tmp_path):
    (tmp_path / "empty").write_text("\n\n")
    assert detect(tmp_path / "empty") == "raw"
    (tmp_path / "bad").write_text("{not json\n")
    assert detect(tmp_path / "bad") == "raw"  # the raw reader names the bad line
    (tmp_path / "shards").write_text("\n/data/a.tar\n")
    assert detect(tmp_path / "shards") == "shard"
    with gzip.open(tmp_path / "m.gz", "wt") as f:
        f.write("not json\n")
    assert detect(tmp_path / "m.gz") == "cuts"
    (tmp_path / "notes.txt").write_text("\nhello world\n")
    with pytest.raises(WenetDataError, match=r"notes.txt:2: not an input"):
        detect(tmp_path / "notes.txt")
    with pytest.raises(WenetDataError, match="not a Lhotse Shar directory"):
        detect(tmp_path)
    with pytest.raises(WenetDataError, match="no such file"):
        detect(tmp_path / "missing")


def test_a_source_is_checked_by_its_kind(tmp_path):
    path = tmp_path / "s.txt"
    path.write_text("a\n")
    with pytest.raises(ValueError, match="a text source has no speech"):
        SourceSpec(path=str(path), type="text", transcripts=False)
    with pytest.raises(ValueError, match="'columns' names a parquet source"):
        SourceSpec(path=str(path), type="text", columns={"audio": "a"})
    with pytest.raises(ValueError, match="'columns' names a parquet source"):
        SourceSpec(path=str(path), type="parquet", columns={"wav": "a"})
    assert SourceSpec(path=str(path), type="parquet", columns={"audio": "a"}).columns
    with pytest.raises(ValueError, match="'fields' describes a Shar source"):
        SourceSpec(fields={"cuts": ["a"]}, type="raw")
    assert SourceSpec(fields={"cuts": ["a"]}).type == "shar"
