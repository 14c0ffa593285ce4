"""Every ``wenet-lhotse`` command shown in the docs runs, in order, per page.

A page's ```bash / ```console blocks are read top to bottom; each line that
starts with ``wenet-lhotse`` or ``$ wenet-lhotse`` (``\\`` continuations joined)
runs in one temporary directory per page, so a page's later commands see the files its earlier
ones wrote. The demo's full-size run is covered by tests/test_demo.py at a
reduced size, so ``wenet-lhotse demo`` lines here get ``--quick``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
FENCE = re.compile(r"```(?:bash|console|sh)\n(.*?)```", re.S)


def commands(page: Path):
    out = []
    for block in FENCE.findall(page.read_text(encoding="utf-8")):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            line = line.split("  #")[0].strip().removeprefix("$ ")
            if line.startswith("wenet-lhotse "):
                out.append(line)
    return out


# docs/cli.md is run, with its outputs checked, by tests/test_cli_data.py.
PAGES_WITH_COMMANDS = [p for p in PAGES if commands(p) and p.name != "cli.md"]


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES_WITH_COMMANDS, ids=lambda p: p.name)
def test_docs_commands_run(page, tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    exe = str(Path(sys.executable).with_name("wenet-lhotse"))
    for cmd in commands(page):
        if cmd.startswith("wenet-lhotse demo") and "--quick" not in cmd:
            cmd += " --quick"
        if not Path(exe).exists():
            cmd = cmd.replace("wenet-lhotse", f"{sys.executable} -m wenet_lhotse", 1)
        res = subprocess.run(cmd, shell=True, cwd=tmp_path, env=env, capture_output=True,
                             text=True, timeout=300)
        assert res.returncode == 0, f"{page.name}: `{cmd}` failed:\n{res.stdout}\n{res.stderr}"


def test_docs_pages_exist():
    # the mkdocs nav names these pages; each must exist
    nav = re.findall(r":\s*(\S+\.md)", (ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    missing = [n for n in nav if not (ROOT / "docs" / n).exists()]
    assert not missing, missing
