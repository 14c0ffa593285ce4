"""Raw lists whose ``wav`` are ``s3://`` objects, against moto's S3 server (and the
fault-injecting proxy) on 127.0.0.1: probed in small range requests, read in training
(the drop-in, map mode) and by import/validate/stats; a blip is retried, a missing
or unreachable object is one error naming list line and URL, or a counted skip."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from cli_server import wenet_lhotse_cmd
from remote_lists import (
    assert_cli_takes_the_list,
    assert_drop_in_features_equal,
    assert_missing_audio_named,
)

from wenet_lhotse import CharTokenizer, SkipReport, WenetDataError, build_dataloader
from wenet_lhotse.corpus import generate_corpus
from wenet_lhotse.formats import read_raw_list
from wenet_lhotse.io.policy import ReadPolicy

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def corpus10(tmp_path_factory):
    """10 utterances of 2-4 s (64-128 KB WAVs)."""
    return generate_corpus(tmp_path_factory.mktemp("s3wav"), num_utterances=10,
                           min_duration=2.0, max_duration=4.0, seed=61)


def s3_list(corpus, s3, tmp_path, extra=()):
    """Upload the wavs; a list like corpus.data_list with s3:// wavs (+ extra lines)."""
    fs = s3.fs()
    lines = []
    for line in corpus.data_list.read_text(encoding="utf-8").splitlines():
        item = json.loads(line)
        name = Path(item["wav"]).name
        fs.put_file(item["wav"], f"{s3.bucket}/wavs/{name}")
        lines.append(json.dumps({**item, "wav": s3.url(f"wavs/{name}")}, ensure_ascii=False))
    lst = tmp_path / "s3.list"
    lst.write_text("\n".join(lines + list(extra)) + "\n", encoding="utf-8")
    return lst


def test_probe_and_load_equal_local_with_a_blip(corpus10, s3_proxy, tmp_path, monkeypatch):
    s3, proxy = s3_proxy
    lst = s3_list(corpus10, s3, tmp_path)
    local = list(read_raw_list(corpus10.data_list))
    got = list(read_raw_list(lst))
    assert [(c.id, c.duration, c.sampling_rate) for c in got] == \
        [(c.id, c.duration, c.sampling_rate) for c in local]
    # header probes: a few small ranges per file, not the files
    spans = [tuple(map(int, r.split("=")[1].split("-"))) for r in proxy.ranges]
    fetched = sum(b - a + 1 for a, b in spans)
    total = sum(os.path.getsize(c.recording.sources[0].source) for c in local)
    assert got[0].recording.sources[0].source.startswith("s3://")
    assert fetched <= len(got) * 24 * 1024 < total / 2, (fetched, total)
    proxy.arm(cut_after=20_000)  # the first audio download is cut once: retried
    for a, b in zip(got, local):
        np.testing.assert_array_equal(a.load_audio(), b.load_audio())
    assert proxy.faults_done == 1


def test_missing_and_unreachable_objects(corpus10, s3_proxy, tmp_path, monkeypatch):
    monkeypatch.setenv("WENET_LHOTSE_RETRIES", "1")
    monkeypatch.setenv("WENET_LHOTSE_RETRY_BACKOFF_S", "0.01")
    s3, proxy = s3_proxy
    gone = s3.url("wavs/absent.wav")
    lst = s3_list(corpus10, s3, tmp_path, [json.dumps({"key": "x", "wav": gone, "txt": "a"})])
    assert_missing_audio_named(lst, gone, line=11, kept=10)
    two = tmp_path / "two.list"
    two.write_text("".join(lst.read_text().splitlines(keepends=True)[:2]))
    proxy.arm(cut_after=2_000, times=1000)  # every header read cut, past the retries
    report = SkipReport()
    assert list(read_raw_list(two, policy=ReadPolicy(strict=False, skip_report=report))) == []
    assert [(i.source, i.line, i.kind) for i in report] == [(str(two), 1, "io"),
                                                            (str(two), 2, "io")]
    first = report.items[0]
    assert "s3://" in first.message and "gave up after 1 retries" in first.message


def test_drop_in_map_mode_features_equal_local(corpus10, s3, tmp_path):
    assert_drop_in_features_equal(s3_list(corpus10, s3, tmp_path), corpus10.data_list,
                                  corpus10.units)


def test_object_gone_after_probe_is_a_counted_skip_in_training(corpus10, s3, tmp_path):
    lst = s3_list(corpus10, s3, tmp_path)
    conf = {"fbank_conf": {"num_mel_bins": 23}, "lhotse_conf": {"fault_tolerant": True}}
    tok = CharTokenizer(corpus10.units)
    _, loader = build_dataloader(str(lst), tok, conf, "train")
    _, strict = build_dataloader(str(lst), tok, {**conf, "lhotse_conf": {}}, "train")
    for dl in (loader, strict):  # epoch 1 probes the headers (and reads the audio)
        assert sorted(k for b in dl for k in b["keys"]) == sorted(corpus10.keys)
    victim = json.loads(lst.read_text().splitlines()[2])
    s3.fs().rm_file(victim["wav"].split("://", 1)[1])
    keys = sorted(k for b in loader for k in b["keys"])
    assert keys == sorted(set(corpus10.keys) - {victim["key"]})
    [item] = list(loader.skip_report)
    assert item.source == victim["wav"] and victim["key"] in item.message
    assert "no such object" in item.message and "\n" not in item.message
    with pytest.raises(WenetDataError, match="no such object"):
        list(strict)


def test_cli_import_validate_stats(corpus10, s3, tmp_path):
    lst = s3_list(corpus10, s3, tmp_path)
    env = dict(os.environ, PYTHONPATH=str(REPO))

    def cli(*args):
        res = subprocess.run([*wenet_lhotse_cmd(), *map(str, args)],
                             env=env, capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr
        return res.stdout

    assert_cli_takes_the_list(cli, lst, corpus10.data_list, 10, tmp_path, jobs=2)
