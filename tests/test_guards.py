"""Under ``CI=true`` a test that guards a documented promise cannot pass by skipping
(``guards.py``): pytest runs in a subprocess on a few WeNet parity files with
``WENET_ROOT`` pointing nowhere, and on a test that needs a package that is not there."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
PARITY_FILES = ["tests/test_wenet_batching.py", "tests/test_wenet_harness.py"]


def pytest_run(args, ci: bool, cwd: Path = REPO, processes: int = 0,
               **env: str) -> subprocess.CompletedProcess:
    """``python -m pytest args`` in a fresh process (``processes`` xdist test processes, 0:
    none), with ``CI=true`` or without ``CI``."""
    environ = {k: v for k, v in os.environ.items() if k != "CI"}
    environ["PYTHONPATH"] = os.pathsep.join(
        [str(REPO), str(TESTS), *filter(None, [os.environ.get("PYTHONPATH")])])
    environ.update(env)
    if ci:
        environ["CI"] = "true"
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
                           f"-n{processes}", *args],
                          cwd=cwd, env=environ, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("processes", [0, 2])
def test_ci_collection_fails_without_wenet_and_names_what_is_not_checked(tmp_path, processes):
    """Also under xdist (``.ci/run``'s ``-n auto``), where an error in a test process's
    collection is an INTERNALERROR in the controller: the same one line, pytest's
    usage-error status, no test run."""
    nowhere = tmp_path / "no-wenet-here"
    args = ["-q", *PARITY_FILES] if processes else ["--collect-only", "-q", *PARITY_FILES]
    res = pytest_run(args, ci=True, processes=processes, WENET_ROOT=str(nowhere))
    out = res.stdout + res.stderr
    assert res.returncode == pytest.ExitCode.USAGE_ERROR, out
    assert "INTERNALERROR" not in out and " passed" not in out, out
    line = next(ln for ln in out.splitlines() if "would not be checked" in ln)
    assert "CI=true: 13 WeNet parity tests would not be checked" in line, line
    assert "tests/test_wenet_batching.py: 9" in line and "tests/test_wenet_harness.py: 4" in line
    assert f"WeNet's source not found at {nowhere}" in line, line


def test_locally_they_skip_with_one_line_saying_what_was_not_checked(tmp_path):
    nowhere = tmp_path / "no-wenet-here"
    res = pytest_run(["-q", PARITY_FILES[0]], ci=False, WENET_ROOT=str(nowhere))
    out = res.stdout + res.stderr
    assert res.returncode == 0 and "9 skipped" in out, out
    summary = [ln for ln in out.splitlines() if ln.startswith("NOT CHECKED")]
    assert len(summary) == 1, out
    assert "9 x WeNet parity (WeNet's source not found at" in summary[0], summary


@pytest.mark.parametrize("ci", [True, False])
def test_a_missing_test_extra_fails_under_ci_and_skips_locally(tmp_path, ci):
    (tmp_path / "test_needs_it.py").write_text(textwrap.dedent("""
        from guards import guarded_import

        def test_needs_a_missing_package():
            guarded_import("wenet_lhotse_no_such_package")

        def test_plain_skip_stays_a_skip():
            import pytest
            pytest.skip("no CUDA device here")
    """))
    res = pytest_run(["-q", "-rs", str(tmp_path)], ci=ci, cwd=tmp_path)
    out = res.stdout + res.stderr
    if ci:
        assert res.returncode == 1 and "1 failed, 1 skipped" in out, out
        assert ("CI=true: a test guarding a documented promise cannot run: "
                "wenet_lhotse_no_such_package is not importable") in out, out
    else:
        assert res.returncode == 0 and "2 skipped" in out, out
        assert "not checked: wenet_lhotse_no_such_package is not importable" in out, out


@pytest.mark.parametrize("value, ci", [("true", True), ("1", True), ("yes", True),
                                       ("", False), ("0", False), ("false", False)])
def test_what_counts_as_ci(monkeypatch, value, ci):
    from guards import in_ci

    monkeypatch.setenv("CI", value)
    assert in_ci() is ci
