"""Shared fixtures: small real corpora written by the package's own generator."""

from __future__ import annotations

import functools
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

import pytest
from lhotse import CutSet
from lhotse.utils import fastcopy

from wenet_lhotse.corpus import generate_corpus
from wenet_lhotse.formats import read_raw_list


@pytest.fixture(scope="session")
def corpus(tmp_path_factory):
    """20 utterances of 1-4 s at 16 kHz: wavs, raw data.list, units.txt (no shards)."""
    return generate_corpus(tmp_path_factory.mktemp("corpus"), num_utterances=20,
                           min_duration=1.0, max_duration=4.0, seed=1)


@pytest.fixture(scope="session")
def corpus_cuts(corpus):
    """The ``corpus`` as Lhotse cuts built with Lhotse alone (Recording.from_file +
    one SupervisionSegment per utterance), independent of our readers."""
    import json

    from lhotse import CutSet, Recording, SupervisionSegment

    cuts = []
    for line in corpus.data_list.read_text(encoding="utf-8").splitlines():
        item = json.loads(line)
        rec = Recording.from_file(item["wav"], recording_id=item["key"])
        cut = rec.to_cut()
        cut.supervisions = [SupervisionSegment(
            id=item["key"], recording_id=rec.id, start=0.0, duration=rec.duration,
            text=item["txt"], speaker=item["speaker"])]
        cuts.append(cut)
    return CutSet.from_cuts(cuts)


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, *args):  # keep test output clean
        pass


@pytest.fixture
def http_serve():
    """``serve(directory, handler_class=...) -> base URL``: a real HTTP server on
    127.0.0.1 (free port) per call, shut down after the test."""
    servers = []

    def serve(directory, handler_class=_QuietHandler) -> str:
        handler = functools.partial(handler_class, directory=str(directory))
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
        thread.start()
        servers.append((server, thread))
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield serve
    for server, thread in servers:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture(scope="session")
def wenet_root():
    """WeNet's source (``$WENET_ROOT``, default ``../shared/wenet``); skips when absent."""
    from wenet_harness import wenet_missing, wenet_root

    reason = wenet_missing()
    if reason:
        pytest.skip(reason)
    return wenet_root()


from servers import dask_cluster, moto_endpoint, s3, s3_auth, s3_proxy  # noqa: E402,F401


@pytest.fixture(scope="session")
def data(corpus, tmp_path_factory):
    """The corpus for the loader tests: as a cuts manifest, a Shar dir (6 cuts per shard)
    and the raw list, plus two big metadata-only manifests for mux statistics."""
    root = tmp_path_factory.mktemp("loader")
    cuts = CutSet.from_cuts(list(read_raw_list(corpus.data_list)))
    cuts.to_file(root / "cuts.jsonl.gz")
    shar = root / "shar"
    shar.mkdir()
    cuts.to_shar(shar, fields={"recording": "flac"}, shard_size=6)
    # Two larger metadata-only sources (ids renamed copies of real cuts) for mux statistics.
    big = []
    for name in ("a", "b"):
        path = root / f"{name}.jsonl.gz"
        CutSet.from_cuts(fastcopy(c, id=f"{name}-{i}") for i, c in
                         enumerate(list(cuts) * 150)).to_file(path)
        big.append(path)
    return {"cuts": cuts, "manifest": root / "cuts.jsonl.gz", "shar": shar, "big": big,
            "raw": corpus.data_list}
