"""A ``wenet-lhotse`` on ``PATH`` whose commands start without paying the imports again:
for tests that run many CLI commands through a shell (the docs pages, the recipes).

Each ``wenet-lhotse ARGS`` is still its own process, run by the shell with the caller's
working directory, environment, stdin/stdout/stderr and exit status; what differs from the
installed console script is only where that process comes from. A server started once per
test session imports ``wenet_lhotse.cli`` (and with it torch and Lhotse: ~3 s of every
command) and waits on a Unix socket; the ``wenet-lhotse`` file put first on ``PATH`` is a
small script (no torch) that hands its argv, cwd, environment and fds 0-2 to the server,
which forks a fresh child per command: the child takes the caller's cwd, environment and
fds, runs ``wenet_lhotse.cli.main`` exactly as the console script does
(``sys.argv = [path, *args]; sys.exit(main())``) with Python's own exit steps (threads
joined, ``atexit``), and its exit status (or the signal that ended it) is the script's.
What a command takes from the server rather than from its caller: the interpreter's
start-up state -- ``sys.path`` and the other ``PYTHON*`` variables (a caller whose
``PYTHON*`` variables differ gets a fresh ``python -m wenet_lhotse`` instead), the hash
seed (one per session, not one per command) -- and the modules imported before the fork,
not yet used. Process-level limits a caller sets on its child (``preexec_fn``) would not
reach the command: such calls run ``python -m wenet_lhotse`` (tests/adversarial.py). The
installed console script itself is run by tests/test_cli_data.py::test_real_subprocess and
tests/test_wheel.py.

Usage: ``python tests/cli_server.py SOCKET`` (the server); :func:`start` in a fixture.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

#: the script put on PATH as ``wenet-lhotse``: connects, sends, waits for the status; a
#: caller whose ``PYTHON*`` variables differ from the server's (read when an interpreter
#: starts: PYTHONPATH, PYTHONWARNINGS, ...) gets a fresh interpreter instead
CLIENT = r'''#!{python} -S
import json, os, signal, socket, struct, sys
if {{k: v for k, v in os.environ.items() if k.startswith("PYTHON")}} != {python_env!r}:
    os.execv({python!r}, [{python!r}, "-m", "wenet_lhotse", *sys.argv[1:]])
s = socket.socket(socket.AF_UNIX)
s.connect({sock!r})
msg = json.dumps({{"argv": sys.argv, "cwd": os.getcwd(), "env": dict(os.environ)}}).encode()
socket.send_fds(s, [struct.pack("!I", len(msg))], [0, 1, 2])
s.sendall(msg)
data = b""
while len(data) < 4:
    chunk = s.recv(4 - len(data))
    if not chunk:
        sys.exit("wenet-lhotse (test server): the command's process vanished")
    data += chunk
status = struct.unpack("!i", data)[0]
if status < 0:  # ended by a signal: end the same way, as the shell would see it
    signal.signal(-status, signal.SIG_DFL)
    os.kill(os.getpid(), -status)
sys.exit(status)
'''


def _recv_exact(conn: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise EOFError("client went away")
        data += chunk
    return data


def _run_command(request: dict) -> None:
    """In the forked child: become the command's process, run the CLI, exit."""
    import atexit
    import threading

    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = list(request["argv"])
    rc = 1
    try:
        from wenet_lhotse.cli import main

        main()  # click: sys.exit with the command's status
        rc = 0
    except SystemExit as e:  # as the interpreter turns sys.exit(x) into a status
        if e.code is None:
            rc = 0
        elif isinstance(e.code, int):
            rc = e.code
        else:
            print(e.code, file=sys.stderr)
            rc = 1
    except BaseException:  # an uncaught exception: traceback and status 1, as Python does
        import traceback

        traceback.print_exc()
        rc = 1
    finally:
        try:
            threading._shutdown()  # type: ignore[attr-defined]  # the interpreter's exit steps
            atexit._run_exitfuncs()
            for f in (sys.stdout, sys.stderr):
                try:
                    f.flush()
                except Exception:  # noqa: BLE001 - a closed pipe: nothing more to say
                    pass
        finally:  # whatever the exit steps raise (a signal), never return into the server
            os._exit(rc & 0xFF)


def _handle(conn: socket.socket) -> None:
    """In a child of the server: fork the command's process, wait for it and send its
    status. If the client goes away first (killed by its caller's timeout), the command
    is killed too, as ``subprocess.run`` kills the process it started."""
    import select

    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    header, fds, _, _ = socket.recv_fds(conn, 4, 3)
    request = json.loads(_recv_exact(conn, struct.unpack("!I", header)[0]))
    pid = os.fork()
    if pid == 0:
        try:
            conn.close()
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
                os.close(fd)
            _run_command(request)
        finally:  # _run_command exits; this catches a failure before it
            os._exit(1)
    for fd in fds:
        os.close(fd)
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):  # Linux < 5.3: wait without watching the client
        pidfd = None
    if pidfd is not None:
        ready, _, _ = select.select([pidfd, conn], [], [])
        if pidfd not in ready:  # the client's end closed: nobody waits for this command
            os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    try:
        conn.sendall(struct.pack("!i", code))
    except OSError:  # the client was killed: nobody to tell
        pass


def _reap(signum: int, frame: object) -> None:
    """Reap the finished handlers (SIGCHLD): their CPU time then adds to the server's
    children's, and the server's to whoever waits for it (the test session)."""
    try:
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass
    except ChildProcessError:
        pass


def serve(sock_path: str) -> None:
    """Import the CLI, listen on ``sock_path``, fork a child per connection (forever)."""
    import lhotse  # noqa: F401  (torch with it: what every command would import again)

    import wenet_lhotse.cli  # noqa: F401

    signal.signal(signal.SIGCHLD, _reap)  # (reaped, not ignored: their CPU time is counted)
    server = socket.socket(socket.AF_UNIX)
    server.bind(sock_path + ".tmp")
    server.listen(16)
    os.rename(sock_path + ".tmp", sock_path)  # ready: the fixture waits for this name
    while True:
        conn, _ = server.accept()
        sys.stdout.flush()
        sys.stderr.flush()
        if os.fork() == 0:
            code = 1
            try:
                server.close()
                _handle(conn)
                code = 0
            finally:
                os._exit(code)
        conn.close()


def start(directory: Path, env: Optional[dict] = None, timeout: float = 120.0):
    """Start a server and write the ``wenet-lhotse`` script into ``directory`` (put it
    first on ``PATH``). Returns the server's process (terminate it when done)."""
    directory.mkdir(parents=True, exist_ok=True)
    sock = directory / "cli.sock"
    log = directory / "server.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, __file__, str(sock)], env=env,
                                stdin=subprocess.DEVNULL, stdout=out, stderr=out)
    deadline = time.monotonic() + timeout
    while not sock.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"the CLI test server did not start: "
                               f"{log.read_text(errors='replace')[-3000:]}")
        time.sleep(0.05)
    script = directory / "wenet-lhotse"
    python_env = {k: v for k, v in (os.environ if env is None else env).items()
                  if k.startswith("PYTHON")}
    script.write_text(CLIENT.format(python=sys.executable, sock=str(sock),
                                    python_env=python_env))
    script.chmod(0o755)
    return proc


_SHARED: dict = {}


def shared_bin() -> Path:
    """The directory of this process' one server's ``wenet-lhotse`` (started on first use
    with ``PYTHONPATH`` = the repository root, ended when this process exits)."""
    if "bin" not in _SHARED:
        import atexit
        import tempfile

        root = Path(__file__).resolve().parents[1]
        directory = Path(tempfile.mkdtemp(prefix="wenet-lhotse-cli-"))
        proc = start(directory, env=dict(os.environ, PYTHONPATH=str(root)))

        def stop() -> None:
            proc.terminate()
            proc.wait(timeout=30)
            import shutil

            shutil.rmtree(directory, ignore_errors=True)

        atexit.register(stop)
        _SHARED["bin"] = directory
    return _SHARED["bin"]


def wenet_lhotse_cmd() -> list:
    """``[path]`` of the shared server's ``wenet-lhotse``: a command's argv starts so."""
    return [str(shared_bin() / "wenet-lhotse")]


if __name__ == "__main__":
    if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
        del sys.path[0]  # as for the console script: tests/ is not on the command's path
    serve(sys.argv[1])
