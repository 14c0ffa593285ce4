"""docs/architecture.md's module table names every module of the package."""

from __future__ import annotations

import re
from pathlib import Path

import wenet_lhotse

ROOT = Path(wenet_lhotse.__file__).parent
DOC = ROOT.parent / "docs" / "architecture.md"


def _named_in_table():
    """Dotted module names the table's rows name: ``a.b``, shorthand ``.c`` after an
    ``a.x`` in the same cell, and whole packages (``cli``, ``demo``); a module described
    inside another's row (``features.dither``) counts."""
    names = set()
    for line in DOC.read_text(encoding="utf-8").splitlines():
        if not line.startswith("| `"):
            continue
        package = ""
        for ref in re.findall(r"`([\w.]+)`", line):
            if ref.startswith(".") and package:
                names.add(package + ref)
            else:
                names.add(ref)
                package = ref.rsplit(".", 1)[0] if "." in ref else ref
    return names


def test_every_module_has_a_row():
    named = _named_in_table()
    text = DOC.read_text(encoding="utf-8")
    missing = []
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] in ("__init__", "__main__"):
            continue
        name = ".".join(parts)
        if name in named or parts[0] in named:  # the module, or its whole package
            continue
        if f"`wenet_lhotse.{name}`" in text:  # an old import path, named as such
            continue
        missing.append(name)
    assert not missing, f"docs/architecture.md has no row for {missing}"
