"""Shards over real HTTP (a server on 127.0.0.1) and through ``pipe:`` commands
(allowed explicitly: see tests/test_hardening_security.py for the refusal)."""

from __future__ import annotations

from http.server import SimpleHTTPRequestHandler

import numpy as np
import pytest

from wenet_lhotse.corpus import generate_corpus
from wenet_lhotse.errors import SkipReport, WenetDataError
from wenet_lhotse.formats import read_shard_list
from wenet_lhotse.io.policy import ReadPolicy
from wenet_lhotse.io.streams import open_input


@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    return generate_corpus(tmp_path_factory.mktemp("sharded"), num_utterances=6,
                           min_duration=0.5, max_duration=1.0, shard_size=2, seed=11)


@pytest.fixture
def http_root(sharded, http_serve):
    """Serves the corpus's shard directory on 127.0.0.1; the base URL."""
    return http_serve(sharded.root / "shards")


def tar_names(sharded):
    return [p.rsplit("/", 1)[1] for p in sharded.shards_list.read_text().splitlines()]


def assert_same_cuts(got, expected):
    assert [c.id for c in got] == [c.id for c in expected]
    for a, b in zip(got, expected):
        assert a.supervisions[0].text == b.supervisions[0].text
        assert a.supervisions[0].speaker == b.supervisions[0].speaker
        np.testing.assert_array_equal(a.load_audio(), b.load_audio())


def test_http_shards_equal_local(sharded, http_root, tmp_path):
    url_list = tmp_path / "urls.list"
    url_list.write_text("".join(f"{http_root}/{n}\n" for n in tar_names(sharded)))
    local = list(read_shard_list(sharded.shards_list))
    remote = list(read_shard_list(url_list))
    assert len(remote) == 6
    assert_same_cuts(remote, local)


def test_http_missing_shard(sharded, http_root, tmp_path):
    names = tar_names(sharded)
    lst = tmp_path / "urls.list"
    lst.write_text(f"{http_root}/{names[0]}\n{http_root}/nope.tar\n{http_root}/{names[1]}\n")
    with pytest.raises(WenetDataError, match=r"nope\.tar: HTTP status 404") as e:
        list(read_shard_list(lst))
    assert e.value.kind == "missing_file" and "urls.list:2" in str(e.value)
    report = SkipReport()
    got = list(read_shard_list(lst, policy=ReadPolicy(strict=False, skip_report=report)))
    assert [c.id for c in got] == sharded.keys[:4]
    assert [(i.source, i.kind) for i in report] == [(f"{http_root}/nope.tar", "missing_file")]


def test_pipe_cat(sharded, tmp_path):
    lst = tmp_path / "pipe.list"
    lst.write_text("".join(f"pipe:cat {p}\n" for p in sharded.shards_list.read_text().split()))
    assert_same_cuts(list(read_shard_list(lst, policy=ReadPolicy(allow_pipe=True))),
                     list(read_shard_list(sharded.shards_list)))


def test_failing_pipe_names_the_command(sharded, tmp_path):
    first = sharded.shards_list.read_text().split()[0]
    lst = tmp_path / "pipe.list"
    lst.write_text(f"pipe:cat {first}\npipe:cat {tmp_path}/missing.tar\n")
    with pytest.raises(WenetDataError, match=r"pipe:cat .*missing.tar: command exited with "
                                             r"status 1: cat: .*No such file") as e:
        list(read_shard_list(lst, policy=ReadPolicy(allow_pipe=True)))
    assert e.value.kind == "io"
    # a command that fails after a complete tar is still reported
    lst.write_text(f"pipe:cat {first}; exit 3\n")
    report = SkipReport()
    policy = ReadPolicy(strict=False, skip_report=report, allow_pipe=True)
    got = list(read_shard_list(lst,
                               policy=policy))
    assert [c.id for c in got] == sharded.keys[:2]
    assert [i.kind for i in report] == ["io"] and "status 3" in report.items[0].message


def test_stopping_early_ends_the_command(sharded, tmp_path):
    lst = tmp_path / "pipe.list"
    first = sharded.shards_list.read_text().split()[0]
    # `yes` never ends by itself: the reader must kill it when the consumer stops
    lst.write_text(f"pipe:cat {first}; yes\n")
    it = iter(read_shard_list(lst, policy=ReadPolicy(allow_pipe=True)))
    assert next(it).id == sharded.keys[0]
    it.close()
    f = open_input("pipe:yes", policy=ReadPolicy(allow_pipe=True))
    assert f.read(4) == b"y\ny\n"
    f.close()
    assert f.raw._proc.poll() is not None  # killed, not left running


def test_open_input_kinds(sharded, http_root):
    tar = sharded.shards_list.read_text().split()[0]
    data = open(tar, "rb").read()
    for name in (tar, f"file://{tar}", f"pipe:cat {tar}", f"{http_root}/{tar_names(sharded)[0]}"):
        with open_input(name, policy=ReadPolicy(allow_pipe=True)) as f:
            assert f.read() == data
    with pytest.raises(WenetDataError, match="no such file"):
        open_input(tar + ".absent")


class _CutShortHandler(SimpleHTTPRequestHandler):
    """Announces the whole file but sends only its first half, then hangs up."""

    def log_message(self, *args):
        pass

    def do_GET(self):
        data = open(self.translate_path(self.path), "rb").read()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data[: len(data) // 2])
        self.wfile.flush()
        self.close_connection = True


def test_http_download_cut_short(sharded, tmp_path, http_serve, monkeypatch):
    """The server cuts the response short and ignores range requests: the retry
    cannot resume, and says so."""
    monkeypatch.setenv("WENET_LHOTSE_RETRY_BACKOFF_S", "0.01")
    base = http_serve(sharded.root / "shards", _CutShortHandler)
    url = f"{base}/{tar_names(sharded)[0]}"
    lst = tmp_path / "u.list"
    lst.write_text(url + "\n")
    with pytest.raises(WenetDataError) as e:
        list(read_shard_list(lst))
    assert e.value.source == url and e.value.kind == "truncated"
    assert "lost at byte" in str(e.value) and "does not support range requests" in str(e.value)
