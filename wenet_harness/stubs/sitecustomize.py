"""Runs at interpreter start when this folder is on PYTHONPATH (subprocesses)."""

import wenet_shims  # noqa: F401
