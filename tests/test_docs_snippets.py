"""Every ``wenet-lhotse`` command shown in the docs runs, in order, per page.

A page's ```bash / ```console / ```sh blocks are read top to bottom; each line
that starts with ``wenet-lhotse`` or ``$ wenet-lhotse`` (``\\`` continuations
joined) runs in one temporary directory per page, so a page's later commands
see the files its earlier ones wrote. On the pages in ``RUN_PYTHON`` the
```python blocks run too, in page order, in the same directory. The demo's
full-size run is covered by tests/test_demo.py at a reduced size, so
``wenet-lhotse demo`` lines here get ``--quick``; that command (``-o DIR`` aside) is run
once per session by the ``demo_quick`` fixture, which test_demo.py checks in detail: a page's
``wenet-lhotse demo --quick [-o DIR]`` asserts that run's success and copies what it wrote
to DIR (default ``demo_out``) in the page's directory. The ``wenet-lhotse`` on the shell's
``PATH`` is the ``cli_bin`` fixture's: each command its own process, forked from a server
that imported the CLI once (tests/cli_server.py), not a fresh interpreter per command.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from guards import guarded_import

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
#: the demo's command, as steps() leaves it: the ``demo_quick`` fixture's run
DEMO = re.compile(r"wenet-lhotse demo --quick(?: -o (\S+))?")
FENCE = re.compile(r"```(bash|console|sh|python)\n(.*?)```", re.S)
# Pages whose Python examples are run here; formats.md and features.md have their own
# doc tests, the others show fragments of a training script.
RUN_PYTHON = {"README.md", "quickstart.md"}


def steps(page: Path):
    """``("sh", command)`` and ``("python", code)`` in page order."""
    out = []
    for lang, block in FENCE.findall(page.read_text(encoding="utf-8")):
        if lang == "python":
            if page.name in RUN_PYTHON:
                out.append(("python", block))
            continue
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():
            line = line.split("  #")[0].strip().removeprefix("$ ")
            if line.startswith("wenet-lhotse "):
                if line.startswith("wenet-lhotse demo") and "--quick" not in line:
                    line += " --quick"
                out.append(("sh", line))
    return out


# docs/cli.md is run, with its outputs checked, by tests/test_cli_data.py;
# docs/distributed.md needs a Dask cluster and an S3 server: tests/test_docs_distributed.py.
PAGES_WITH_COMMANDS = [p for p in PAGES if any(k == "sh" for k, _ in steps(p))
                       and p.name not in ("cli.md", "distributed.md")]


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES_WITH_COMMANDS, ids=lambda p: p.name)
def test_docs_commands_run(page, tmp_path, cli_bin, request):
    env = dict(os.environ, PYTHONPATH=str(ROOT),
               PATH=f"{cli_bin}:{Path(sys.executable).parent}:{os.environ['PATH']}")
    for kind, step in steps(page):
        demo = DEMO.fullmatch(step) if kind == "sh" else None
        if demo:  # the session's one run of this command (self-contained: its own corpus)
            res, out = request.getfixturevalue("demo_quick")
            assert res.returncode == 0, f"{page.name}: `{step}` failed:\n{res.stdout}\n{res.stderr}"
            shutil.copytree(out, tmp_path / (demo.group(1) or "demo_out"))
            continue
        cmd = [sys.executable, "-c", step] if kind == "python" else step
        res = subprocess.run(cmd, shell=kind == "sh", cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, f"{page.name}: `{step}` failed:\n{res.stdout}\n{res.stderr}"


def test_docs_pages_exist():
    # the mkdocs nav names these pages; each must exist
    nav = re.findall(r":\s*(\S+\.md)", (ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    missing = [n for n in nav if not (ROOT / "docs" / n).exists()]
    assert not missing, missing


def test_mkdocs_builds_strict(tmp_path):
    """`mkdocs build --strict` fails on broken links and pages missing from the nav."""
    guarded_import("mkdocs", extra="docs")
    res = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q",
                          "-d", str(tmp_path / "site")], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "site" / "quickstart" / "index.html").exists()


def test_migration_lists_every_lhotse_conf_key():
    """docs/migration.md's opt-in table names every ``lhotse_conf`` key, and no other."""
    import dataclasses

    from wenet_lhotse.loader.lhotse_conf import LhotseConf

    text = (ROOT / "docs" / "migration.md").read_text(encoding="utf-8")
    table = text.split("## Our improvements", 1)[1].split("\n## ", 1)[0]
    rows = set(re.findall(r"^\| `(\w+)` \|", table, re.M))
    assert rows == {f.name for f in dataclasses.fields(LhotseConf)}
