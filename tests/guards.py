"""Skips that guard a documented promise fail under ``CI=true``.

A test that checks a promise the docs make -- parity with WeNet's own code at
``$WENET_ROOT``, or a feature that needs a package ``pip install -e ".[test]"``
installs (sentencepiece, mkdocs, ...) -- must not let CI pass by skipping: CI would be
green while the promise rests on nothing. Such tests call :func:`guarded_skip` (or
:func:`guarded_import`) instead of ``pytest.skip`` / ``pytest.importorskip``:

* locally they skip, and the run ends with ONE line saying what was not checked
  (``pytest_terminal_summary`` in ``conftest.py``);
* under ``CI=true`` (CI services set it; ``.ci/run`` exports it) they fail, naming what
  would not have been checked and why.

Plain ``pytest.skip`` stays for what a machine may legitimately lack and no documented
promise depends on here (a CUDA device, the ``curl`` binary). The project's own modules
are imported plainly, never through ``importorskip``: if they stop importing, tests
must fail.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import NoReturn

import pytest

#: prefix of a guarded skip's reason; the terminal summary counts skips by it
PREFIX = "not checked: "


def in_ci() -> bool:
    """True when ``$CI`` is set to anything but empty, ``0``, ``false`` or ``no``."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def guarded_skip(reason: str) -> NoReturn:
    """Skip the test (locally) or fail it (``CI=true``): ``reason`` says what is missing."""
    if in_ci():
        pytest.fail(f"CI=true: a test guarding a documented promise cannot run: {reason}",
                    pytrace=False)
    pytest.skip(PREFIX + reason)


def guarded_import(name: str, extra: str = "test") -> ModuleType:
    """``import name``, or :func:`guarded_skip` naming the extra that installs it."""
    try:
        return importlib.import_module(name)
    except ImportError as err:
        guarded_skip(f"{name} is not importable ({err}); pip install -e '.[{extra}]'")
