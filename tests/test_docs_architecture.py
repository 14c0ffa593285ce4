"""docs/architecture.md's module table names every module of the package."""

from __future__ import annotations

import re
import textwrap
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


def _diff_blocks(heading: str):
    """The ```diff blocks of the "To add ..." item that starts with ``heading``."""
    text = DOC.read_text(encoding="utf-8")
    item = text[text.index(heading):]
    item = item[: item.index("\n* **", 1)] if "\n* **" in item[1:] else item
    return [textwrap.dedent(b.split("```", 1)[0]) for b in item.split("```diff\n")[1:]]


def test_the_augmentation_shown_is_the_code():
    """"To add a feature augmentation" shows spec_trim's module and its registration:
    every line shown is a line of the code, and the registry lists what it shows in
    the order shown."""
    from wenet_lhotse.features import augmentations

    module, registration = _diff_blocks("* **a feature augmentation**")
    code = (ROOT / "features" / "augmentations" / "spec_trim.py").read_text(encoding="utf-8")
    lines = {line.strip() for line in code.splitlines()}
    shown = [ln[1:].strip() for ln in module.splitlines()
             if ln.startswith("+") and ln[1:].strip()]
    assert len(shown) > 10 and [ln for ln in shown if ln not in lines] == []
    init = (ROOT / "features" / "augmentations" / "__init__.py").read_text(encoding="utf-8")
    init_lines = {line.strip() for line in init.splitlines()}
    shown = [ln[1:].strip() for ln in registration.splitlines()
             if ln[:1] in "+ " and ln[1:].strip() not in ("", "...")]
    assert [ln for ln in shown if ln not in init_lines] == []
    entries = [ln.rstrip(",") for ln in shown if ln.isupper() or ln.rstrip(",").isupper()]
    assert entries == [a.name.upper() for a in augmentations.AUGMENTATIONS]
