"""sources.shar_dir: the one reading of a Shar directory's file names."""

from __future__ import annotations

import pytest

from wenet_lhotse.sources.shar_dir import (
    cuts_files,
    is_shar_dir,
    shar_fields,
    shar_files,
    shar_shard_number,
    shard_paths,
)


def test_lhotse_written_shar_dir(data):
    shar = data["shar"]  # 20 cuts, 6 per shard: 4 shards, written by Lhotse
    files = shar_files(shar)
    assert set(files) == {"cuts", "recording"} and sorted(files["cuts"]) == [0, 1, 2, 3]
    assert is_shar_dir(shar) and not is_shar_dir(shar / "missing")
    fields = shar_fields(shar)
    assert fields["recording"] == [str(shard_paths(shar, i)[1]) for i in range(4)]
    assert cuts_files(shar) == fields["cuts"] == [str(shard_paths(shar, i)[0]) for i in range(4)]


def test_shar_shard_number_and_incomplete_dirs(tmp_path):
    assert shar_shard_number("cuts.000012.jsonl.gz") == 12
    assert shar_shard_number("recording.tar") is None and shar_shard_number("notes.x.txt") is None
    (tmp_path / "cuts.000000.jsonl.gz").touch()
    (tmp_path / "cuts.000001.jsonl.gz").touch()
    (tmp_path / "recording.000000.tar").touch()
    with pytest.raises(ValueError, match=r"field 'recording' has shards \[0\], cuts has 2"):
        shar_fields(tmp_path)
    with pytest.raises(ValueError, match="not a Shar directory"):
        shar_fields(tmp_path / "empty")
