"""Fault-tolerant training on damaged data keeps going and every skip reaches
``loader.skip_report``; strict mode names the file (issue 12, "Data lost or not
recovered": training)."""

from __future__ import annotations

import gzip
import io
import json
import logging
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from adversarial import REPO, cli

from wenet_lhotse import CharTokenizer, WenetDataError, build_dataloader, wenet_to_shar
from wenet_lhotse.corpus import generate_corpus

HERE = Path(__file__).parent
CONF = {"fbank_conf": {"num_mel_bins": 23}}


@pytest.fixture(scope="module")
def corpus12(tmp_path_factory):
    """12 utterances of 0.3-0.6 s, in 4 tars of 3."""
    return generate_corpus(tmp_path_factory.mktemp("t12"), num_utterances=12,
                           min_duration=0.3, max_duration=0.6, shard_size=3, seed=51)


def keys_of(loader):
    return sorted(k for b in loader for k in b["keys"])


def conf(**lconf):
    return {**CONF, "lhotse_conf": lconf}


def shar_without_member(corpus, tmp_path, shard=1, position=1):
    """A Shar copy of the corpus whose shard ``shard`` lacks the audio member (and its
    .json) of its ``position``-th cut; returns (shar dir, lost key)."""
    out = wenet_to_shar(corpus.data_list, tmp_path / "shar", shard_size=3).out_dir
    tar_path = out / f"recording.{shard:06d}.tar"
    with tarfile.open(tar_path) as tar:
        members = [(m, tar.extractfile(m).read()) for m in tar.getmembers()]
    lost = members[2 * position][0].name.rsplit(".", 1)[0]
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for m, data in members:
            if m.name.rsplit(".", 1)[0] != lost:
                tar.addfile(m, io.BytesIO(data))
    tar_path.write_bytes(buf.getvalue())
    return out, lost


@pytest.mark.parametrize("mode", ["streamed", "map"])
def test_missing_shar_audio_member(corpus12, tmp_path, mode):
    shar, lost = shar_without_member(corpus12, tmp_path)
    tok = CharTokenizer(corpus12.units)
    _, loader = build_dataloader(shar, tok, conf(mode=mode, fault_tolerant=True), "train",
                                 num_workers=2)
    assert keys_of(loader) == sorted(set(corpus12.keys) - {lost})
    items = list(loader.skip_report)
    assert [(i.kind, i.member) for i in items] == [("missing_audio", lost)]
    assert items[0].source.endswith("recording.000001.tar")
    _, strict = build_dataloader(shar, tok, conf(mode=mode), "train")
    with pytest.raises(WenetDataError, match=r"recording\.000001\.tar.*no audio member"):
        keys_of(strict)


def truncate(path: Path, keep: float = 0.5) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


@pytest.mark.parametrize("mode", ["streamed", "map"])
def test_truncated_shar_manifest(corpus12, tmp_path, mode):
    out = wenet_to_shar(corpus12.data_list, tmp_path / "shar", shard_size=6).out_dir
    manifest = out / "cuts.000001.jsonl.gz"
    truncate(manifest, 0.6)
    tok = CharTokenizer(corpus12.units)
    _, loader = build_dataloader(out, tok, conf(mode=mode, fault_tolerant=True), "train")
    got = keys_of(loader)
    assert set(corpus12.keys[:6]) <= set(got) and len(got) < 12
    assert [i.kind for i in loader.skip_report] == ["truncated"]
    assert loader.skip_report.items[0].source == str(manifest)
    with pytest.raises(WenetDataError, match=r"cuts\.000001\.jsonl\.gz"):
        _, strict = build_dataloader(out, tok, conf(mode=mode), "train")
        keys_of(strict)


def test_truncated_plain_manifest(corpus12, tmp_path, caplog):
    man = tmp_path / "cuts.jsonl.gz"
    cli("import", corpus12.data_list, "-o", man, check=0)
    with gzip.open(man, "rb") as f:
        lines = f.read().splitlines(keepends=True)
    raw = io.BytesIO()
    with gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as g:
        g.write(b"".join(lines))
    man.write_bytes(raw.getvalue()[: len(raw.getvalue()) * 2 // 3])
    tok = CharTokenizer(corpus12.units)
    _, loader = build_dataloader(man, tok, conf(fault_tolerant=True),
                                 "train")
    got = keys_of(loader)
    assert 0 < len(got) < 12
    (item,) = loader.skip_report.items
    assert item.kind == "truncated" and item.source == str(man)
    assert "unreadable after line" in item.message
    with pytest.raises(WenetDataError, match="cuts.jsonl.gz:"):
        _, strict = build_dataloader(man, tok, conf(), "train")
        keys_of(strict)
    res = cli("bench", "--data", man, "--units", corpus12.units, "-n", "100",
              "--num-workers", "0")
    assert res.returncode != 0
    assert f"{man}:" in res.stderr and "Aborted!" not in res.stderr
    assert "Traceback" not in res.stderr


def test_worker_without_batches_forwards_its_skips(corpus12, tmp_path, caplog):
    """Streamed, 2 workers, 2 tars: worker 1's tar is garbage, so it yields no batch;
    its skip still reaches loader.skip_report and the end-of-epoch log."""
    tars = corpus12.shards_list.read_text().split()[:2]
    bad = tmp_path / "bad.tar"
    bad.write_bytes(b"not a tar" * 100)
    lst = tmp_path / "two.list"
    lst.write_text(f"{tars[0]}\n{bad}\n")
    _, loader = build_dataloader(lst, CharTokenizer(corpus12.units),
                                 conf(fault_tolerant=True), "train", num_workers=2)
    with caplog.at_level(logging.WARNING):
        assert keys_of(loader) == sorted(corpus12.keys[:3])
    assert [(i.source, i.kind) for i in loader.skip_report] == [(str(bad), "bad_tar")]
    assert any("skipped" in r.getMessage() and "epoch" in r.getMessage()
               for r in caplog.records)


@pytest.mark.slow
def test_ddp_rank_with_nothing_is_an_error(corpus12, tmp_path):
    """2 ranks, 2 tars; rank 1's tar is garbage: rank 1 has no batch at all. Every rank
    stopping at 0 steps silently is what this prevents: both raise, saying why, and
    rank 1's skip is in its skip report."""
    tars = corpus12.shards_list.read_text().split()[:1]
    bad = tmp_path / "bad.tar"
    bad.write_bytes(b"not a tar" * 100)
    lst = tmp_path / "ranks.list"
    lst.write_text(f"{tars[0]}\n{bad}\n")
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "out"
    out.mkdir()
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
           f"--master_port={port}", "--master_addr=127.0.0.1",
           str(HERE / "ddp_empty_rank.py"), str(lst), str(corpus12.units), str(out)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env)
    results = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]
    for r in results:
        assert r["error"] and "no batch" in r["error"] and r["steps"] == 0
    assert [k for k, _ in results[1]["skips"]] == ["bad_tar"]
    assert proc.returncode == 0, proc.stderr[-2000:]


@pytest.mark.parametrize("features_on", ["worker", "device"])
def test_non_finite_audio_is_a_bad_cut_not_features(corpus12, tmp_path, features_on):
    """The issue: NaN/Inf audio reached training as non-finite features, no error and no
    skip even in fault-tolerant mode (only validate reported it)."""
    import numpy as np
    import soundfile as sf

    lines = [json.loads(x) for x in corpus12.data_list.read_text().splitlines()]
    bad = tmp_path / "nan.wav"
    pcm = np.zeros(8000, dtype=np.float32)
    pcm[100], pcm[200] = np.nan, np.inf
    sf.write(bad, pcm, 16000, subtype="FLOAT")
    lines[4] = {**lines[4], "wav": str(bad)}
    lst = tmp_path / "data.list"
    lst.write_text("".join(json.dumps(x) + "\n" for x in lines))
    tok = CharTokenizer(corpus12.units)
    c = conf(fault_tolerant=True, features_on=features_on)
    _, loader = build_dataloader(lst, tok, c, "train")
    assert keys_of(loader) == sorted(set(corpus12.keys) - {lines[4]["key"]})
    (item,) = loader.skip_report.items
    assert item.kind == "bad_audio" and "non-finite" in item.message
    assert str(bad) in item.source
    _, strict = build_dataloader(lst, tok, conf(features_on=features_on), "train")
    with pytest.raises(WenetDataError, match="non-finite samples"):
        keys_of(strict)


@pytest.mark.parametrize("message", [
    "DataLoader worker (pid 4242) is killed by signal: Killed. ",
    "DataLoader worker (pid(s) 4242) exited unexpectedly"])
def test_a_killed_worker_is_never_a_data_error(corpus12, monkeypatch, message):
    """The issue: torch's SIGCHLD handler raises its RuntimeError inside whatever the main
    process runs; parsing a manifest line caught it as a bad line (2 of 51 strict runs)."""
    from wenet_lhotse.errors import is_worker_death
    from wenet_lhotse.formats import read_raw_list
    from wenet_lhotse.sources import manifest, meta_cut

    cut = next(iter(read_raw_list(corpus12.data_list)))
    line = json.dumps(cut.to_dict())
    meta = manifest.parse_manifest_meta(line, "m.jsonl", 1)

    def dies(*a, **k):
        raise RuntimeError(message)

    monkeypatch.setattr(manifest, "deserialize_item", dies)
    monkeypatch.setattr(meta_cut, "deserialize_item", dies)
    with pytest.raises(RuntimeError) as e:
        manifest.parse_manifest_line(line, "m.jsonl", 1)
    assert not isinstance(e.value, WenetDataError) and is_worker_death(e.value)
    with pytest.raises(RuntimeError) as e:
        meta.materialize()
    assert not isinstance(e.value, WenetDataError)
    monkeypatch.setattr(manifest, "deserialize_item", lambda *a: (_ for _ in ()).throw(
        RuntimeError("something else")))
    with pytest.raises(WenetDataError):  # any other failure stays a bad line
        manifest.parse_manifest_line(line, "m.jsonl", 1)
