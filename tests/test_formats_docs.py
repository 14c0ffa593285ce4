"""The Python examples in docs/formats.md run as shown."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "formats.md"


def test_formats_doc_examples_run(tmp_path, monkeypatch, capsys):
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    assert blocks, "docs/formats.md has no python example"
    monkeypatch.chdir(tmp_path)
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), {"__name__": "__doc_example__"})
    out = capsys.readouterr().out
    assert "U000000" in out
    assert len((tmp_path / "demo" / "from_shards.list").read_text().splitlines()) == 8
    assert len(list((tmp_path / "demo" / "audio").glob("*.wav"))) == 8
