"""Parquet read with bounded memory (issue 30): a few-KB zstd file whose one row
decompresses to 200 MB is refused in one line, naming file, row group and limit, before
anything is decompressed (``parquet-import`` in its own process stays far under the
memory the row would take); damaged Parquet and ``.arrow`` files are named in one line;
a ``type: parquet`` training source holds only its rows' metadata, reading each row's
audio back when its batch is emitted."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from click.testing import CliRunner

from wenet_lhotse.cli import main
from wenet_lhotse.errors import WenetDataError

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

ROOT = Path(__file__).resolve().parents[1]
BOMB_BYTES = 200 << 20
#: The child's peak RSS must stay under this (its imports alone take ~300 MB; reading
#: the row would add 200 MB for the value plus pyarrow's decompression buffers).
RSS_LIMIT_KB = 480 << 10

AUDIO = pa.struct([("bytes", pa.binary()), ("path", pa.string())])


def _wav(seconds: float = 0.3) -> bytes:
    buf = io.BytesIO()
    sf.write(buf, np.zeros(int(16000 * seconds), dtype=np.int16), 16000, format="WAV",
             subtype="PCM_16")
    return buf.getvalue()


@pytest.fixture(scope="module")
def bomb(tmp_path_factory):
    path = tmp_path_factory.mktemp("bomb") / "bomb.parquet"
    zeros = pa.py_buffer(np.zeros(BOMB_BYTES, dtype=np.uint8))  # no Python bytes copy
    offsets = pa.py_buffer(np.array([0, BOMB_BYTES], dtype=np.int32))
    data = pa.Array.from_buffers(pa.binary(), 1, [None, offsets, zeros])
    audio = pa.StructArray.from_arrays([data, pa.array(["a.wav"])], fields=list(AUDIO))
    pq.write_table(pa.table({"id": ["a"], "text": ["x"], "audio": audio}), path,
                   compression="zstd", use_dictionary=False, write_statistics=False)
    assert path.stat().st_size < 64 << 10  # a few KB on disk
    return path


def run(*args, code=0):
    res = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)
    assert res.exit_code == code, res.output
    return res


def test_a_decompression_bomb_is_refused_in_one_line_within_bounded_memory(bomb, tmp_path):
    # VmHWM: this process's peak RSS (ru_maxrss would include the forking parent's)
    child = ("import sys\n"
             "from wenet_lhotse.cli import main\n"
             "try:\n"
             "    main(sys.argv[1:], standalone_mode=True)\n"
             "except SystemExit as e:\n"
             "    code = e.code\n"
             "hwm = [ln for ln in open('/proc/self/status') if ln.startswith('VmHWM')]\n"
             "print('maxrss', hwm[0].split()[1], file=sys.stderr)\n"
             "sys.exit(code)\n")
    res = subprocess.run([sys.executable, "-c", child, "parquet-import", str(bomb), "-o",
                          str(tmp_path / "out")], capture_output=True, text=True,
                         cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
                         timeout=300)
    assert res.returncode == 1, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if not ln.startswith("maxrss")]
    assert len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
    assert f"{bomb}: row group 0, column 'audio.bytes'" in lines[0]
    assert "over the ratio cap of 200 (WENET_LHOTSE_MAX_MEMBER_RATIO)" in lines[0]
    rss_kb = int(res.stderr.split("maxrss ")[1].split()[0])
    assert rss_kb < RSS_LIMIT_KB, f"peak RSS {rss_kb} KB"


def test_the_per_row_cap_is_the_read_policy_s(tmp_path):
    from wenet_lhotse.io.policy import ReadPolicy
    from wenet_lhotse.sources.parquet import LazyParquetCuts

    src = tmp_path / "rows.parquet"
    pq.write_table(pa.table({"id": ["a", "b"], "audio": pa.array(
        [{"bytes": _wav(), "path": None}] * 2, AUDIO)}), src)
    assert len(list(LazyParquetCuts([str(src)]))) == 2
    with pytest.raises(WenetDataError, match=r"row group 0, column 'audio.bytes': \d+ "
                       r"decompressed bytes for 2 rows, over the cap of 1000 bytes per row"):
        list(LazyParquetCuts([str(src)], policy=ReadPolicy(max_member_bytes=1000)))


@pytest.mark.parametrize("name", ["cut.parquet", "noise.parquet", "data-00000.arrow"])
def test_damaged_files_are_named_in_one_line(tmp_path, name):
    good = tmp_path / "good.parquet"
    pq.write_table(pa.table({"id": ["a"], "audio": pa.array(
        [{"bytes": _wav(), "path": None}], AUDIO)}), good)
    bad = tmp_path / name
    if name == "cut.parquet":
        bad.write_bytes(good.read_bytes()[:-40])  # footer cut short
    elif name == "noise.parquet":
        data = bytearray(good.read_bytes())
        data[4:200] = bytes(196)  # pages zeroed, footer intact
        bad.write_bytes(bytes(data))
    else:
        bad.write_bytes(b"\xff\xff\xff\xff" + bytes(range(256)) * 4)
    res = run("parquet-import", bad, "-o", tmp_path / "out", code=1)
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"error: {bad}: "), res.output
    assert "cannot read as" in lines[0]


def test_a_training_source_holds_metadata_and_reads_rows_back(tmp_path, monkeypatch):
    from wenet_lhotse.io.policy import ReadPolicy
    from wenet_lhotse.loader.source_readers import SourceReaders
    from wenet_lhotse.sources import SourceSpec
    from wenet_lhotse.sources.parquet import ParquetRowCut
    from wenet_lhotse.sources.registry import get_kind

    src = tmp_path / "train.parquet"
    rows = [{"id": f"u{i}", "audio": {"bytes": _wav(0.1 + i / 50), "path": None},
             "text": f" t{i}"} for i in range(7)]
    pq.write_table(pa.Table.from_pylist(rows), src, row_group_size=3)
    spec = SourceSpec(path=str(src), type="parquet", tags={"task": "asr"})
    reader = get_kind("parquet").map_reader(spec, SourceReaders(ReadPolicy(), light=True))
    held = list(reader.cuts)
    assert len(held) == 7 and all(isinstance(c, ParquetRowCut) for c in held)
    assert not any(hasattr(c, "__dict__") for c in held)  # slots: no audio kept
    for cut, row in zip(held, rows):
        real = reader.materialize(cut)
        assert real.id == row["id"] and real.supervisions[0].text == row["text"]
        assert bytes(real.recording.sources[0].source) == row["audio"]["bytes"]
        assert real.custom["task"] == "asr"
        assert cut.duration == pytest.approx(real.duration)
    # in any order, batches smaller than a row group: only the batch holding it is kept
    import wenet_lhotse.sources.parquet as parquet_source

    monkeypatch.setattr(parquet_source, "BATCH_ROWS", 2)
    for cut, row in reversed(list(zip(held, rows))):
        assert bytes(reader.materialize(cut).recording.sources[0].source) == \
            row["audio"]["bytes"]
        assert sum(len(r) for r in parquet_source._GROUP_CACHE.values()) <= 2
