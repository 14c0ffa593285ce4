"""Raw lists whose ``wav`` are ``http://`` URLs, against a real HTTP server on
127.0.0.1 (conftest's ``http_serve``): headers probed in small range requests, audio
read in training (the drop-in, map mode) through a dropped connection that is resumed
with nothing lost; a 404 is ``missing_audio`` naming list line and URL, a server that
keeps failing one error after the retries, both counted skips in fault-tolerant mode;
import/validate/stats/export take such lists (export keeps the URLs)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from remote_lists import (
    assert_cli_takes_the_list,
    assert_drop_in_features_equal,
    assert_missing_audio_named,
)

from wenet_lhotse import CharTokenizer, SkipReport, WenetDataError, build_dataloader
from wenet_lhotse.cli.main import main
from wenet_lhotse.corpus import generate_corpus
from wenet_lhotse.formats import read_raw_list
from wenet_lhotse.io.policy import ReadPolicy


@pytest.fixture(scope="module")
def corpus8(tmp_path_factory):
    """8 utterances of 2-3 s (64-96 KB WAVs), in ``root/wav``."""
    return generate_corpus(tmp_path_factory.mktemp("httpwav"), num_utterances=8,
                           min_duration=2.0, max_duration=3.0, seed=71)


@pytest.fixture
def fast_retries(monkeypatch):
    monkeypatch.setenv("WENET_LHOTSE_RETRIES", "1")
    monkeypatch.setenv("WENET_LHOTSE_RETRY_BACKOFF_S", "0.01")


def url_list(corpus, base, tmp_path, extra=(), name="http.list"):
    """corpus.data_list with each wav at ``base/NAME`` (+ ``extra`` lines)."""
    lines = []
    for line in corpus.data_list.read_text(encoding="utf-8").splitlines():
        item = json.loads(line)
        lines.append(json.dumps({**item, "wav": f"{base}/{Path(item['wav']).name}"},
                                ensure_ascii=False))
    lst = tmp_path / name
    lst.write_text("\n".join(lines + list(extra)) + "\n", encoding="utf-8")
    return lst


def test_range_probes_and_training_through_a_dropped_connection(corpus8, http_serve,
                                                                tmp_path, fast_retries):
    base = http_serve(corpus8.root / "wav", mode="drop_once")  # every whole GET cut once
    lst = url_list(corpus8, base, tmp_path)
    local = list(read_raw_list(corpus8.data_list))
    got = list(read_raw_list(lst))
    assert [(c.id, c.duration, c.sampling_rate) for c in got] == \
        [(c.id, c.duration, c.sampling_rate) for c in local]
    assert got[0].recording.sources[0].source.startswith("http://127.0.0.1:")
    spans = [tuple(map(int, r.split("=")[1].split("-"))) for r in base.server.ranges]
    fetched = sum(b - a + 1 for a, b in spans)  # bounded ranges only, a few per file
    sizes = {Path(c.recording.sources[0].source).name:
             os.path.getsize(c.recording.sources[0].source) for c in local}
    assert fetched <= len(got) * 24 * 1024 < sum(sizes.values()) / 2, fetched

    base.server.ranges.clear()
    assert_drop_in_features_equal(lst, corpus8.data_list, corpus8.units)
    resumed = {f"bytes={s // 2}-" for s in sizes.values()}
    assert resumed <= set(base.server.ranges)  # each file: cut at half, resumed there


def test_missing_and_failing_urls(corpus8, http_serve, tmp_path, fast_retries):
    base = http_serve(corpus8.root / "wav", mode="ranges")
    gone = f"{base}/absent.wav"
    lst = url_list(corpus8, base, tmp_path, [json.dumps({"key": "x", "wav": gone})])
    assert_missing_audio_named(lst, gone, line=9, kept=8)

    failing = http_serve(corpus8.root / "wav", mode="error")  # 500, every time
    bad = url_list(corpus8, failing, tmp_path, name="bad.list")
    with pytest.raises(WenetDataError) as info:
        list(read_raw_list(bad))
    err = str(info.value)
    assert err.startswith(f"{bad}:1: cannot read audio header of {failing}/")
    assert "HTTP status 500" in err and "gave up after 1 retries" in err
    assert "\n" not in err
    report = SkipReport()
    assert list(read_raw_list(bad, policy=ReadPolicy(strict=False, skip_report=report))) == []
    assert [(i.line, i.kind) for i in report] == [(n, "io") for n in range(1, 9)]

    plain = http_serve(corpus8.root / "wav", mode="ok")  # no range support: whole files
    local = list(read_raw_list(corpus8.data_list))
    assert [c.duration for c in read_raw_list(url_list(corpus8, plain, tmp_path, name="o"))] \
        == [c.duration for c in local]


def test_file_gone_after_probe_is_a_counted_skip_in_training(corpus8, http_serve, tmp_path):
    wavs = tmp_path / "wav"
    wavs.mkdir()
    for p in (corpus8.root / "wav").iterdir():
        (wavs / p.name).write_bytes(p.read_bytes())
    lst = url_list(corpus8, http_serve(wavs, mode="ranges"), tmp_path)
    conf = {"fbank_conf": {"num_mel_bins": 23}, "lhotse_conf": {"fault_tolerant": True}}
    _, loader = build_dataloader(str(lst), CharTokenizer(corpus8.units), conf, "train")
    assert sorted(k for b in loader for k in b["keys"]) == sorted(corpus8.keys)
    victim = json.loads(lst.read_text().splitlines()[2])
    (wavs / Path(victim["wav"]).name).unlink()
    assert sorted(k for b in loader for k in b["keys"]) == \
        sorted(set(corpus8.keys) - {victim["key"]})
    [item] = list(loader.skip_report)
    assert item.source == victim["wav"] and victim["key"] in item.message
    assert "HTTP status 404" in item.message and "\n" not in item.message


def test_cli_import_validate_stats_export(corpus8, http_serve, tmp_path):
    lst = url_list(corpus8, http_serve(corpus8.root / "wav", mode="ranges"), tmp_path)

    def cli(*args):
        res = CliRunner().invoke(main, [str(a) for a in args])
        assert res.exit_code == 0, res.output
        return res.stdout

    assert_cli_takes_the_list(cli, lst, corpus8.data_list, 8, tmp_path, jobs=1)
