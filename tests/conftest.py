"""Shared fixtures: small real corpora written by the package's own generator."""

from __future__ import annotations

import pytest

from wenet_lhotse.corpus import generate_corpus


@pytest.fixture(scope="session")
def corpus(tmp_path_factory):
    """20 utterances of 1-4 s at 16 kHz: wavs, raw data.list, units.txt (no shards)."""
    return generate_corpus(tmp_path_factory.mktemp("corpus"), num_utterances=20,
                           min_duration=1.0, max_duration=4.0, seed=1)
