"""``http(s)://`` shards through the retrying reader, against a real HTTP server on
127.0.0.1 (conftest's ``http_serve``): a connection dropped mid-tar resumes with a
range request and loses nothing; a server that then fails for good gives one error
naming URL and member (counted in fault-tolerant mode); one without range support
fails clearly. The deadlines are tested in test_hardening_processes.py."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from wenet_lhotse import SkipReport, WenetDataError, read_shard_list
from wenet_lhotse.corpus import generate_corpus
from wenet_lhotse.io.policy import ReadPolicy
from wenet_lhotse.loader.build import build_dataloader


@pytest.fixture(scope="module")
def corpus6(tmp_path_factory):
    """6 utterances of ~1 s, 3 tars of 2 (about 70 KB each)."""
    return generate_corpus(tmp_path_factory.mktemp("c6"), num_utterances=6,
                           min_duration=1.0, max_duration=1.2, shard_size=2, seed=43)


@pytest.fixture
def fast_retries(monkeypatch):
    monkeypatch.setenv("WENET_LHOTSE_RETRIES", "2")
    monkeypatch.setenv("WENET_LHOTSE_RETRY_BACKOFF_S", "0.01")


def url_list(corpus, base, tmp_path):
    names = [Path(t).name for t in corpus.shards_list.read_text().split()]
    lst = tmp_path / "urls.list"
    lst.write_text("".join(f"{base}/{n}\n" for n in names))
    return lst, [f"{base}/{n}" for n in names]


def test_dropped_connection_resumes_with_a_range_request(corpus6, tmp_path, http_serve):
    base = http_serve(corpus6.root / "shards", mode="drop_once")
    lst, _ = url_list(corpus6, base, tmp_path)
    got = list(read_shard_list(lst))
    local = list(read_shard_list(corpus6.shards_list))
    assert [c.id for c in got] == [c.id for c in local] and len(got) == 6
    for a, b in zip(got, local):  # nothing lost, nothing delivered twice
        np.testing.assert_array_equal(a.load_audio(), b.load_audio())
    sizes = [Path(t).stat().st_size for t in corpus6.shards_list.read_text().split()]
    assert base.server.ranges == [r for s in sizes for r in (None, f"bytes={s // 2}-")]


def test_dropped_connection_while_training_loses_nothing(corpus6, tmp_path, http_serve):
    class Keys:
        def __getitem__(self, cuts):
            return [c.id for c in cuts]

    base = http_serve(corpus6.root / "shards", mode="drop_once")
    lst, _ = url_list(corpus6, base, tmp_path)
    conf = {"batch_conf": {"batch_type": "static", "batch_size": 2}}
    _, loader = build_dataloader(str(lst), None, conf, "train", dataset=Keys(), seed=1)
    assert sorted(k for batch in loader for k in batch) == sorted(corpus6.keys)
    ranges = base.server.ranges  # every tar opening was dropped once and resumed
    assert sum(r is not None for r in ranges) == sum(r is None for r in ranges) >= 3


def test_server_failing_after_a_drop_is_one_clear_error(corpus6, tmp_path, http_serve,
                                                        fast_retries):
    base = http_serve(corpus6.root / "shards", mode="drop_then_error")
    lst, urls = url_list(corpus6, base, tmp_path)
    with pytest.raises(WenetDataError) as info:
        list(read_shard_list(lst))
    err = info.value
    assert err.kind == "io" and err.source == urls[0] and err.member
    assert "HTTP status 500" in err.message and "2 retries" in err.message
    assert "\n" not in str(err) and err.member in str(err)
    resume = base.server.ranges[1]  # the first request, then 2 retries from the offset
    assert resume.startswith("bytes=") and base.server.ranges == [None, resume, resume]

    report = SkipReport()
    kept = list(read_shard_list(lst, policy=ReadPolicy(strict=False, skip_report=report)))
    assert [(i.source, i.kind) for i in report] == [(u, "io") for u in urls]
    assert all(i.member for i in report)
    assert len(kept) < 6  # what was read before the drop is kept, the rest is counted


def test_server_without_range_support_fails_clearly(corpus6, tmp_path, http_serve,
                                                    fast_retries):
    base = http_serve(corpus6.root / "shards", mode="lie_length")  # cut short, no ranges
    lst, urls = url_list(corpus6, base, tmp_path)
    with pytest.raises(WenetDataError) as info:
        list(read_shard_list(lst))
    err = info.value
    assert err.kind == "truncated" and err.source == urls[0]
    assert "does not support range requests" in err.message and "\n" not in str(err)


def test_retries_stay_within_the_request_deadline(corpus6, tmp_path, http_serve,
                                                  monkeypatch):
    """Backoff long enough to outlast the whole-request deadline: the retries end in
    the deadline's error, not in a wait past it."""
    monkeypatch.setenv("WENET_LHOTSE_RETRY_BACKOFF_S", "30")
    monkeypatch.setenv("WENET_LHOTSE_HTTP_DEADLINE_S", "1")
    base = http_serve(corpus6.root / "shards", mode="drop_then_error")
    lst, urls = url_list(corpus6, base, tmp_path)
    with pytest.raises(WenetDataError) as info:
        list(read_shard_list(lst))
    err = info.value
    assert err.kind == "timeout" and "deadline" in err.message and err.source == urls[0]
    assert err.member  # the member being read when the connection dropped
