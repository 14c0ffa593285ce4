"""Real servers for tests, started on 127.0.0.1 as separate processes and stopped by
the fixtures: moto's standalone S3 server, a TCP proxy that can drop a connection
or answer 503 once, and a Dask scheduler with two single-thread workers.

Imported into ``conftest.py`` so that the fixtures are visible to every test.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest

DUMMY_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing-key-id",
    "AWS_SECRET_ACCESS_KEY": "testing-secret",
    "AWS_DEFAULT_REGION": "us-east-1",
    # never ask the EC2 metadata address for credentials: no traffic off 127.0.0.1
    "AWS_EC2_METADATA_DISABLED": "true",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, proc: subprocess.Popen, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode} before listening")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout} s")


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def start_moto(port: int, env: Optional[Dict[str, str]] = None) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-p", str(port), "-H", "127.0.0.1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, **(env or {})})
    wait_for_port(port, proc)
    return proc


@dataclass
class S3:
    """A bucket on the moto server; ``env`` points boto/s3fs at it (no real AWS)."""

    endpoint: str
    bucket: str
    env: Dict[str, str] = field(default_factory=dict)

    def url(self, key: str = "") -> str:
        return f"s3://{self.bucket}/{key}"

    def fs(self):
        import s3fs

        return s3fs.S3FileSystem(client_kwargs={"endpoint_url": self.endpoint},
                                 skip_instance_cache=True)

    def put_dir(self, local_dir, prefix: str) -> str:
        """Upload every file of ``local_dir`` under ``prefix``; its URL."""
        fs = self.fs()
        for path in sorted(os.listdir(local_dir)):
            full = os.path.join(local_dir, path)
            if os.path.isfile(full):
                fs.put_file(full, f"{self.bucket}/{prefix}/{path}")
        return self.url(prefix)


def _use_endpoint(monkeypatch, endpoint: str) -> Dict[str, str]:
    env = {**DUMMY_CREDENTIALS, "AWS_ENDPOINT_URL": endpoint}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()  # cached clients hold the old endpoint
    return env


@pytest.fixture(scope="session")
def moto_endpoint():
    """moto's S3 server in its own process for the session: its URL."""
    port = free_port()
    proc = start_moto(port)
    yield f"http://127.0.0.1:{port}"
    stop(proc)


@pytest.fixture
def s3(moto_endpoint, monkeypatch) -> S3:
    """A fresh bucket, and the environment set so that ``s3://`` URLs reach it
    (subprocesses started by the test inherit it)."""
    env = _use_endpoint(monkeypatch, moto_endpoint)
    store = S3(moto_endpoint, f"b-{uuid.uuid4().hex[:12]}", env)
    store.fs().mkdir(store.bucket)
    yield store
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()


@pytest.fixture
def s3_auth(monkeypatch):
    """A moto server that checks signatures (every key pair is unknown to it): for
    wrong-credential errors. Yields its endpoint; the environment points at it."""
    port = free_port()
    proc = start_moto(port, {"INITIAL_NO_AUTH_ACTION_COUNT": "0"})
    endpoint = f"http://127.0.0.1:{port}"
    _use_endpoint(monkeypatch, endpoint)
    yield endpoint
    stop(proc)


class FaultyProxy:
    """A TCP proxy on 127.0.0.1 in front of ``upstream_port``. Faults, each done once
    per :meth:`arm` call (counted in ``faults_done``):

    * ``cut_after=N``: the first response larger than N bytes is cut after N bytes
      (both sockets closed), as a network blip would;
    * ``status_503=True``: the first request is answered ``503 Slow Down`` without
      reaching the server;
    * ``stall_after=N``: the first response larger than N bytes stops after N bytes,
      the connection left open and silent until the proxy is closed.
    """

    def __init__(self, upstream_port: int) -> None:
        self.upstream = upstream_port
        self._srv = socket.create_server(("127.0.0.1", 0))
        self.port = self._srv.getsockname()[1]
        self._lock = threading.Lock()
        self.cuts_left = 0
        self.cut_after = 0
        self.stalls_left = 0
        self.stall_after = 0
        self._released = threading.Event()
        self.errors_left = 0
        self.faults_done = 0
        self.connections = 0
        self.ranges: List[str] = []  # Range headers of the requests seen, in order
        self._closing = False
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def arm(self, cut_after: int = 0, times: int = 1, status_503: bool = False,
            stall_after: int = 0) -> None:
        with self._lock:
            if stall_after:
                self.stall_after, self.stalls_left = stall_after, times
            if cut_after:
                self.cut_after, self.cuts_left = cut_after, times
            if status_503:
                self.errors_left = times

    def _serve(self) -> None:
        while not self._closing:
            try:
                client, _ = self._srv.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._handle, args=(client,), daemon=True).start()

    def _handle(self, client: socket.socket) -> None:
        with self._lock:
            fail = self.errors_left > 0
            if fail:
                self.errors_left -= 1
                self.faults_done += 1
        if fail:
            client.recv(65536)
            body = b"<Error><Code>SlowDown</Code><Message>Slow Down</Message></Error>"
            client.sendall(b"HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\n"
                           b"Content-Length: %d\r\nConnection: close\r\n\r\n%s"
                           % (len(body), body))
            client.close()
            return
        try:
            up = socket.create_connection(("127.0.0.1", self.upstream))
        except OSError:
            client.close()
            return
        threading.Thread(target=self._pump, args=(client, up, False), daemon=True).start()
        self._pump(up, client, True)

    def _pump(self, src: socket.socket, dst: socket.socket, downstream: bool) -> None:
        sent = 0
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if not downstream:
                    for line in data.split(b"\r\n"):
                        if line.lower().startswith(b"range:"):
                            self.ranges.append(line.split(b":", 1)[1].strip().decode())
                if downstream:
                    with self._lock:
                        cut = self.cuts_left > 0 and sent + len(data) > self.cut_after
                        if cut:
                            self.cuts_left -= 1
                            self.faults_done += 1
                        stall = (not cut and self.stalls_left > 0
                                 and sent + len(data) > self.stall_after)
                        if stall:
                            self.stalls_left -= 1
                            self.faults_done += 1
                    if cut:
                        dst.sendall(data[: max(0, self.cut_after - sent)])
                        break
                    if stall:
                        dst.sendall(data[: max(0, self.stall_after - sent)])
                        self._released.wait()
                        break
                dst.sendall(data)
                sent += len(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()

    def close(self) -> None:
        self._closing = True
        self._released.set()
        self._srv.close()


@pytest.fixture
def s3_proxy(s3, monkeypatch):
    """``(s3, proxy)``: the bucket of ``s3`` reached through a :class:`FaultyProxy`
    (the environment's endpoint is the proxy's)."""
    port = int(s3.endpoint.rsplit(":", 1)[1])
    proxy = FaultyProxy(port)
    _use_endpoint(monkeypatch, proxy.endpoint)
    yield s3, proxy
    proxy.close()


@dataclass
class DaskCluster:
    address: str
    workers: List[subprocess.Popen]
    scheduler: subprocess.Popen
    env: Dict[str, str] = field(default_factory=dict)
    log: Any = None
    local_dir: Optional[Path] = None

    def add_worker(self, name: str, nthreads: int = 1) -> subprocess.Popen:
        """Start one more worker process (as a SLURM job that leaves the queue late
        would); it is stopped with the cluster."""
        proc = subprocess.Popen(
            _dask_cmd("dask_worker", self.address, "--nthreads", str(nthreads),
                      "--nworkers", "1", "--host", "127.0.0.1", "--no-dashboard",
                      "--name", name, "--local-directory", str(self.local_dir / name),
                      "--no-nanny"),
            stdout=self.log, stderr=self.log, env=self.env)
        self.workers.append(proc)
        return proc


def _dask_cmd(*args: str) -> List[str]:
    return [sys.executable, "-m", "distributed.cli." + args[0], *args[1:]]


@contextmanager
def _dask_cluster(tmp_path: Path, moto_endpoint: str, num_workers: int):
    """A scheduler and ``num_workers`` workers (see :func:`dask_cluster`), stopped after."""
    port = free_port()
    here = os.path.dirname(os.path.abspath(__file__))
    # Workers import this checkout's wenet_lhotse and the tests' task functions.
    path = os.pathsep.join([os.path.dirname(here), here, os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, **DUMMY_CREDENTIALS, "AWS_ENDPOINT_URL": moto_endpoint,
           "PYTHONPATH": path, "DASK_DISTRIBUTED__WORKER__DAEMON": "False"}
    log = open(tmp_path / "dask.log", "wb")
    sched = subprocess.Popen(
        _dask_cmd("dask_scheduler", "--host", "127.0.0.1", "--port", str(port),
                  "--dashboard-address", ":0", "--no-show"),
        stdout=log, stderr=log, env=env)
    cluster = DaskCluster(f"tcp://127.0.0.1:{port}", [], sched, env, log, tmp_path)
    try:
        wait_for_port(port, sched)
        for i in range(num_workers):
            cluster.add_worker(f"w{i}")
        from distributed import Client

        with Client(cluster.address, timeout=60) as client:
            client.wait_for_workers(num_workers, timeout=120)
        yield cluster
    finally:
        for p in cluster.workers:
            stop(p)
        stop(sched)
        log.close()


@pytest.fixture(scope="session")
def _shared_dask_cluster(tmp_path_factory, moto_endpoint):
    """The session's 2-worker cluster, for the tests that only submit work to one."""
    with _dask_cluster(tmp_path_factory.mktemp("dask"), moto_endpoint, 2) as cluster:
        yield cluster


@pytest.fixture
def dask_cluster(request, tmp_path, moto_endpoint):
    """A ``dask scheduler`` and two ``dask worker --nthreads 1`` processes on
    127.0.0.1 (separate processes, not in-process threads); stopped afterwards. The
    workers' environment reaches the session's S3 server (``moto_endpoint``), as a
    real cluster's would reach its object store. Indirect parametrization sets the
    number of workers it starts with (``DaskCluster.add_worker`` adds more).

    A test that changes the cluster (kills or adds a worker, kills the scheduler) gets its
    own: indirect parametrization or the ``own_dask_cluster`` marker. The others share
    one cluster per session (starting one is ~3 processes of imports), checked alive."""
    if hasattr(request, "param") or request.node.get_closest_marker("own_dask_cluster"):
        with _dask_cluster(tmp_path, moto_endpoint, getattr(request, "param", 2)) as cluster:
            yield cluster
        return
    cluster = request.getfixturevalue("_shared_dask_cluster")
    dead = [p.args for p in [cluster.scheduler, *cluster.workers] if p.poll() is not None]
    assert not dead, f"the shared Dask cluster lost {dead}: mark such tests own_dask_cluster"
    yield cluster
    assert len(cluster.workers) == 2 and all(p.poll() is None for p in cluster.workers), \
        "a test changed the shared Dask cluster: mark it own_dask_cluster"
