"""The Python snippets in docs/features.md run as shown."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[1] / "docs" / "features.md"
SNIPPETS = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)


def test_doc_has_snippets():
    assert len(SNIPPETS) >= 2


@pytest.mark.parametrize("index", range(len(SNIPPETS)))
def test_doc_snippet_runs(index):
    exec(compile(SNIPPETS[index], f"{DOC}:snippet{index}", "exec"), {})
