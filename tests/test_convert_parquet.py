"""Parquet / Hugging Face datasets: a real ``datasets`` save_to_disk directory and Parquet
files built here (no hub), imported to WeNet shards and exported back to Parquet with
every audio byte and text equal; trained from directly (``type: parquet``); bad rows
named by file and row, counted in tolerant mode."""

from __future__ import annotations

import io
import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
datasets = pytest.importorskip("datasets")

from wenet_lhotse import CharTokenizer  # noqa: E402
from wenet_lhotse.errors import SkipReport, WenetDataError  # noqa: E402
from wenet_lhotse.formats import read_shard_list  # noqa: E402
from wenet_lhotse.io.policy import ReadPolicy  # noqa: E402
from wenet_lhotse.loader.build import build_dataloader  # noqa: E402
from wenet_lhotse.sources.parquet import LazyParquetCuts  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def _cli(*args):
    env = {"PYTHONPATH": str(ROOT)}
    import os

    from cli_server import wenet_lhotse_cmd  # the CLI in its own process, forked

    return subprocess.run([*wenet_lhotse_cmd(), *map(str, args)],
                          capture_output=True, text=True, env={**os.environ, **env})


@pytest.fixture(scope="module")
def rows(corpus):
    """The corpus as rows: WAV bytes of half, FLAC bytes of the other half, texts."""
    import soundfile as sf

    out = []
    for i, line in enumerate(corpus.data_list.read_text(encoding="utf-8").splitlines()):
        item = json.loads(line)
        data = Path(item["wav"]).read_bytes()
        if i % 2:
            samples, sr = sf.read(io.BytesIO(data), dtype="int16")
            buf = io.BytesIO()
            sf.write(buf, samples, sr, format="FLAC")
            data = buf.getvalue()
        out.append({"id": item["key"], "audio": {"bytes": data, "path": None},
                    "text": item["txt"]})
    return out


@pytest.fixture(scope="module")
def hf_dir(rows, tmp_path_factory):
    ds = datasets.Dataset.from_list(rows).cast_column("audio", datasets.Audio(decode=False))
    path = tmp_path_factory.mktemp("hf") / "ds"
    ds.save_to_disk(str(path), num_shards=2)
    return path


def _parquet_rows(path):
    table = pq.read_table(path)
    return [(r["id"], r["audio"]["bytes"], r["text"]) for r in table.to_pylist()]


def test_datasets_dir_to_shards_to_parquet_lossless(rows, hf_dir, tmp_path):
    res = _cli("parquet-import", hf_dir, "-o", tmp_path / "shards", "--shard-size", "6")
    assert res.returncode == 0, res.stderr
    shard_list = tmp_path / "shards" / "shards.list"
    assert len(shard_list.read_text().splitlines()) == 4  # 20 rows, 6 per tar
    cuts = list(read_shard_list(str(shard_list)))
    assert [c.id for c in cuts] == [r["id"] for r in rows]
    assert cuts[1].load_audio().shape[1] == cuts[1].num_samples  # FLAC decodes
    res = _cli("parquet-export", shard_list, tmp_path / "back.parquet")
    assert res.returncode == 0, res.stderr
    want = [(r["id"], r["audio"]["bytes"], r["text"]) for r in rows]
    assert _parquet_rows(tmp_path / "back.parquet") == want  # every byte and text
    # through Shar too: shards -> Shar (bit-exact 'copy' audio) -> Parquet
    res = _cli("import", shard_list, "--shar", tmp_path / "shar", "--audio-format", "copy")
    assert res.returncode == 0, res.stderr
    res = _cli("parquet-export", tmp_path / "shar", tmp_path / "shar.parquet")
    assert res.returncode == 0, res.stderr
    assert _parquet_rows(tmp_path / "shar.parquet") == want
    # and Hugging Face's own reader takes it back as Audio(decode=False)
    back = datasets.Dataset.from_parquet(str(tmp_path / "back.parquet"))
    back = back.cast_column("audio", datasets.Audio(decode=False))
    assert [b["audio"]["bytes"] for b in back] == [w[1] for w in want]


def test_parquet_custom_columns_round_trip(rows, tmp_path):
    src = tmp_path / "in.parquet"
    pq.write_table(pa.Table.from_pylist([{"utt": r["id"], "wav_bytes": r["audio"]["bytes"],
                                          "sentence": r["text"]} for r in rows]), src)
    cuts = list(LazyParquetCuts([str(src)], columns=_cols("wav_bytes", "sentence", "utt")))
    assert [c.supervisions[0].text for c in cuts] == [r["text"] for r in rows]
    res = _cli("parquet-import", src, "-o", tmp_path / "s", "--audio-column", "wav_bytes",
               "--text-column", "sentence", "--id-column", "utt")
    assert res.returncode == 0, res.stderr
    res = _cli("parquet-export", tmp_path / "s" / "shards.list", tmp_path / "o.parquet")
    assert _parquet_rows(tmp_path / "o.parquet") == [
        (r["id"], r["audio"]["bytes"], r["text"]) for r in rows]


def _cols(audio, text, key):
    from wenet_lhotse.sources.parquet import ParquetColumns

    return ParquetColumns(audio=audio, text=text, id=key)


def test_bad_rows_named_and_counted(rows, tmp_path):
    bad = [dict(r) for r in rows[:4]]
    bad[1]["audio"] = {"bytes": None, "path": None}
    bad[2]["audio"] = {"bytes": b"not audio at all", "path": None}
    src = tmp_path / "bad.parquet"
    pq.write_table(pa.Table.from_pylist(bad), src)
    with pytest.raises(WenetDataError, match=r"bad\.parquet: row 1: column 'audio' holds no"):
        list(LazyParquetCuts([str(src)]))
    report = SkipReport(log=False)
    got = list(LazyParquetCuts([str(src)], policy=ReadPolicy(strict=False, skip_report=report)))
    assert [c.id for c in got] == [bad[0]["id"], bad[3]["id"]]
    assert [(i.kind, "row 2" in i.message or "row 1" in i.message) for i in report.items] == [
        ("missing_audio", True), ("bad_audio", True)]
    res = _cli("parquet-import", src, "-o", tmp_path / "o")
    assert res.returncode == 1 and res.stderr.count("\n") == 1
    assert "bad.parquet: row 1:" in res.stderr
    res = _cli("parquet-import", src, "-o", tmp_path / "o", "--fault-tolerant")
    assert res.returncode == 0 and "wrote 2 utterances" in res.stdout
    assert "skipped 2 bad rows" in res.stdout


def test_train_directly_from_a_parquet_source(corpus, hf_dir):
    tok = CharTokenizer(corpus.units)
    conf = {"batch_conf": {"batch_type": "static", "batch_size": 4},
            "fbank_conf": {"num_mel_bins": 40, "dither": 0.0},
            "filter_conf": {"token_max_length": 1000},
            "lhotse_conf": {"num_buckets": 2}}
    _, loader = build_dataloader({"path": str(hf_dir), "type": "parquet",
                                  "tags": {"task": "asr"}}, tok, conf, "train", seed=1)
    keys = []
    for batch in loader:
        assert batch["feats"].shape[2] == 40 and set(batch["tasks"]) == {"asr"}
        assert (batch["target_lengths"] > 0).all()
        keys += batch["keys"]
    ids = [json.loads(x)["key"] for x in corpus.data_list.read_text().splitlines()]
    assert sorted(keys) == sorted(ids)
    assert np.isfinite(batch["feats"].numpy()).all()
