"""Shared fixtures: small real corpora written by the package's own generator."""

from __future__ import annotations

import functools
import threading
from collections import Counter
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from typing import List

import pytest
from guards import PREFIX, guarded_skip, in_ci
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


class AdversarialHandler(_QuietHandler):
    """Serves files, misbehaving as ``self.server.mode`` says:

    * ``ok``: like a plain server;
    * ``trickle``: 512 bytes every ``server.interval`` seconds;
    * ``stall``: the headers and 1 KiB, then nothing until the server stops;
    * ``drop``: half the body, then the connection is closed (no Content-Length);
    * ``lie_length``: a Content-Length larger than the body, then close;
    * ``lie_content``: status 200 with an HTML page instead of the file;
    * ``error``: status 500;
    * ``ranges``: like ``ok``, and ``Range: bytes=A-B`` / ``bytes=A-`` requests are
      answered ``206 Partial Content`` with those bytes.

    Modes that drop every response to a request without a Range header (a
    Content-Length, then half the body, then close), and answer ``Range: bytes=N-``
    requests:

    * ``drop_once``: with ``206 Partial Content`` (the bytes asked for);
    * ``drop_then_error``: with status 500, every time.

    Every request's Range header (or None) is appended to ``server.ranges``.
    """

    def do_GET(self):
        mode, stop = self.server.mode, self.server.stop
        self.server.ranges.append(self.headers.get("Range"))
        if mode == "ok":
            return super().do_GET()
        if mode == "error":
            self.send_error(500, "internal error")
            return
        if mode in ("drop_once", "drop_then_error", "ranges") and self.headers.get("Range"):
            return self._range(mode)
        data = self._file_bytes()
        if data is None:
            return
        if mode == "lie_content":
            data = b"<html><body>Welcome! Please log in.</body></html>" * 20
        self.send_response(200)
        if mode in ("trickle", "stall", "lie_content", "drop_once", "drop_then_error",
                    "ranges"):
            self.send_header("Content-Length", str(len(data)))
        elif mode == "lie_length":
            self.send_header("Content-Length", str(len(data) * 3))
        self.end_headers()
        self.close_connection = True
        try:
            if mode == "trickle":
                for i in range(0, len(data), 512):
                    self.wfile.write(data[i:i + 512])
                    self.wfile.flush()
                    if stop.wait(self.server.interval):
                        return
            elif mode == "stall":
                self.wfile.write(data[:1024])
                self.wfile.flush()
                stop.wait()
            elif mode in ("drop", "drop_once", "drop_then_error"):
                self.wfile.write(data[: len(data) // 2])
            else:
                self.wfile.write(data)
        except OSError:  # the client gave up: what a deadline is for
            pass

    def _file_bytes(self):
        """The requested file's bytes, or None after answering 404."""
        try:
            with open(self.translate_path(self.path), "rb") as f:
                return f.read()
        except OSError:
            self.send_error(404)
            return None

    def _range(self, mode: str) -> None:
        if mode == "drop_then_error":
            self.send_error(500, "internal error")
            return
        data = self._file_bytes()
        if data is None:
            return
        first, _, last = self.headers["Range"].split("=", 1)[1].partition("-")
        start, end = int(first), min(int(last or len(data) - 1), len(data) - 1)
        self.send_response(206)
        self.send_header("Content-Range", f"bytes {start}-{end}/{len(data)}")
        self.send_header("Content-Length", str(end + 1 - start))
        self.end_headers()
        self.wfile.write(data[start:end + 1])


class _ServedURL(str):
    server: ThreadingHTTPServer


@pytest.fixture
def http_serve():
    """``serve(directory, handler_class=..., mode="ok", interval=0.2) -> base URL``: a real
    HTTP server on 127.0.0.1 (free port) per call, shut down after the test. With
    :class:`AdversarialHandler` (the default), ``mode`` picks how it misbehaves. The
    URL's ``.server`` is the server (``.server.ranges``: the Range headers seen)."""
    servers = []

    def serve(directory, handler_class=AdversarialHandler, mode="ok",
              interval=0.2) -> str:
        handler = functools.partial(handler_class, directory=str(directory))
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        server.daemon_threads = True
        server.block_on_close = False  # a stalled handler must not hold up the test
        server.mode, server.interval, server.stop = mode, interval, threading.Event()
        server.ranges = []
        thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
        thread.start()
        servers.append((server, thread))
        url = _ServedURL(f"http://127.0.0.1:{server.server_address[1]}")
        url.server = server
        return url

    yield serve
    for server, thread in servers:
        server.stop.set()
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture(scope="session")
def wenet_root():
    """WeNet's source (``$WENET_ROOT``, default ``../shared/wenet``). When WeNet cannot run
    here: a guarded skip (a failure under ``CI=true``, see ``guards.py``)."""
    from wenet_harness import wenet_missing, wenet_root

    reason = wenet_missing()
    if reason:
        guarded_skip(f"WeNet parity ({reason})")
    return wenet_root()


def pytest_configure(config) -> None:
    import session_signals

    session_signals.install()  # SIGTERM ends the session and its children (issue 30)


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item):
    """pytest-timeout's limit per test (``timeout`` in pyproject.toml, or a test's own
    ``timeout`` mark) is a hang guard: on a loaded machine it is stretched by
    ``adversarial.load_factor()`` when the test starts (issue 30: the suite on 2 cores with
    8 busy processes beside it), so that a test that would pass on a quiet machine is not
    cut off for the CPU it waited for. Runs before pytest-timeout reads the mark."""
    from adversarial import load_factor

    factor = min(load_factor(), 3.0)  # a hang in CI still ends within 3x the limit
    marker = item.get_closest_marker("timeout")
    base = None
    if marker is not None:
        base = marker.args[0] if marker.args else marker.kwargs.get("timeout")
    if base is None:
        base = getattr(item.config, "_env_timeout", None)
    if factor > 1 and base:
        kwargs = dict(marker.kwargs) if marker is not None else {}
        kwargs.pop("timeout", None)
        item.add_marker(pytest.mark.timeout(float(base) * factor, **kwargs), append=False)
    yield


#: at most this many test processes under ``-n auto``: each may start torchrun's ranks and
#: their DataLoader workers (6+ processes), so more would only trade CPU for memory
MAX_TEST_PROCESSES = 4


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config) -> int:
    """``-n auto`` (pyproject's addopts): one test process per CPU this process may run
    on (``sched_getaffinity``: a CI runner's 2 vCPUs are 2 even if they share a core,
    where xdist's own count of physical cores says 1), at least 2 -- the suite waits on
    subprocesses, servers and sleeps enough that 2 processes pay off on one core -- and
    at most :data:`MAX_TEST_PROCESSES`."""
    import os

    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(2, min(cpus or 1, MAX_TEST_PROCESSES))


def pytest_collection_modifyitems(session: pytest.Session, config, items) -> None:
    """The files holding ``slow`` tests (torchrun, WeNet's ``train.py``, wheels) run first,
    the most such tests first: with whole files per process (``--dist loadfile``), a long
    file started last would leave the other processes idle at the end. Stable: the order
    within a file, and of the other files, is pytest's."""
    slow = Counter(item.nodeid.split("::")[0] for item in items
                   if item.get_closest_marker("slow"))
    items.sort(key=lambda item: -slow[item.nodeid.split("::")[0]])


#: the guard's message from the test processes, for the xdist controller to print
_ci_stops: List[str] = []


@pytest.hookimpl(tryfirst=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    """Under ``CI=true``, stop before running anything when collected tests compare with
    WeNet's own code and WeNet cannot run here: the message names what would not be
    checked (otherwise each of them would fail alone, with the same reason).

    In an xdist test process an exception here is only an INTERNALERROR in the
    controller, so the process runs nothing (its items are cleared before xdist sends
    them: ``tryfirst``) and hands the message to the controller, which prints it and
    exits with pytest's usage-error status (:func:`pytest_sessionfinish`)."""
    if not in_ci():
        return
    from wenet_harness import wenet_missing

    parity = [item for item in session.items if "wenet_root" in getattr(item, "fixturenames", ())]
    reason = wenet_missing() if parity else None
    if not reason:
        return
    per_file = Counter(item.nodeid.split("::")[0] for item in parity)
    message = (f"CI=true: {len(parity)} WeNet parity tests would not be checked "
               f"({', '.join(f'{f}: {n}' for f, n in sorted(per_file.items()))}): {reason}")
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is None:
        raise pytest.UsageError(message)
    workeroutput["ci_stop"] = message
    session.items.clear()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    message = getattr(node, "workeroutput", {}).get("ci_stop")
    if message and message not in _ci_stops:
        _ci_stops.append(message)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus) -> None:
    if _ci_stops:
        session.config.get_terminal_writer().line(f"ERROR: {_ci_stops[0]}", red=True)
        session.exitstatus = pytest.ExitCode.USAGE_ERROR


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    """One line naming the guarded skips of this run: the promises not checked here."""
    reasons: Counter = Counter()
    for report in terminalreporter.stats.get("skipped", []):
        if isinstance(report.longrepr, tuple):
            message = report.longrepr[2].split("Skipped: ", 1)[-1]
            if message.startswith(PREFIX):
                reasons[message[len(PREFIX):]] += 1
    if reasons:
        terminalreporter.write_line(
            f"NOT CHECKED ({sum(reasons.values())} skipped tests guard documented promises; "
            "CI=true fails them): "
            + "; ".join(f"{n} x {why}" for why, n in sorted(reasons.items())), yellow=True)


from servers import (  # noqa: E402,F401
    _shared_dask_cluster,
    dask_cluster,
    moto_endpoint,
    s3,
    s3_auth,
    s3_proxy,
)


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


@pytest.fixture(scope="session")
def cli_bin():
    """A directory holding a ``wenet-lhotse`` to put first on ``PATH``: each command is its
    own process, forked from a server that imported the CLI once (tests/cli_server.py),
    so a page or recipe of many commands does not pay torch's import per command."""
    import cli_server

    return cli_server.shared_bin()


@pytest.fixture(scope="session")
def demo_quick(tmp_path_factory):
    """``wenet-lhotse demo --quick -o DIR``, run once per session (a real subprocess, ~20 s)
    for every test that checks it: tests/test_demo.py checks what it wrote, the docs pages
    that show the command (index.md, quickstart.md) that it ran. Returns the finished
    process and DIR."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    out = tmp_path_factory.mktemp("demo_quick") / "demo"
    res = subprocess.run([sys.executable, "-m", "wenet_lhotse", "demo", "--quick", "-o",
                          str(out)], capture_output=True, text=True, timeout=600,
                         env=dict(os.environ, PYTHONPATH=str(root)))
    return res, out
