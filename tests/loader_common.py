"""Shared by the loader tests: a small config, and real map-style datasets returning
what the tests look at. (The ``data`` fixture is in conftest.py.)"""

from __future__ import annotations

CONF = {"batch_conf": {"batch_type": "dynamic", "max_frames_in_batch": 1200},
        "lhotse_conf": {"num_buckets": 3, "buffer_size": 40}}


class Keys:
    """A real map-style dataset returning what the tests look at."""

    def __getitem__(self, cuts):
        return [(c.id, (c.custom or {}).get("lang")) for c in cuts]


class Ids:
    """A real map-style dataset returning the cut ids of each batch."""

    def __getitem__(self, cuts):
        return [c.id for c in cuts]


class Audio:
    def __getitem__(self, cuts):
        return {c.id: c.load_audio() for c in cuts}


def _epoch(loader):
    return [[k for k, _ in b] for b in loader]
