"""sources.detect: one detector for every input kind."""

from __future__ import annotations

import pytest

from wenet_lhotse.sources import SourceSpec, detect_source_type


def test_detect_source_type(data):
    assert detect_source_type(data["manifest"]) == "cuts"
    assert detect_source_type(data["raw"]) == "raw"
    assert detect_source_type(data["shar"]) == "shar"
    with pytest.raises(ValueError, match="weight"):
        SourceSpec(path=str(data["raw"]), weight=0)
