"""A bounded CPU load generator: ``N`` busy processes for ``T`` seconds, then it stops
itself -- to try the suite (or one test file) under load, as issue 30 asks (on 2 cores at
load 9-15 the README's test command met timing races).

Usage (from the repository root)::

    python bench/load.py -n 8 -t 300 &      # 8 busy processes for at most 300 s
    PYTHONPATH=$PWD python -m pytest tests/test_hardening_lifetime.py -q

Each worker spins on arithmetic until the deadline, and also ends within a second of
its parent's end, however that ends (``kill -9`` included: it polls ``os.getppid()``),
so no stray load outlives the generator. SIGTERM / Ctrl-C stop everything at once. It
prints one line when it starts and one when it ends (how long it ran, the 1-minute load
average then). No figures here: it makes load, it does not measure.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import signal
import sys
import time


def _spin(parent: int, deadline: float) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the generator decides
    x = 0
    while time.monotonic() < deadline and os.getppid() == parent:
        for _ in range(200_000):  # about 10 ms of work between checks
            x = (x * 1103515245 + 12345) & 0x7FFFFFFF
    os._exit(0)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", "--procs", type=int, default=8, help="busy processes [8]")
    ap.add_argument("-t", "--seconds", type=float, default=300.0,
                    help="how long, then everything stops [300]")
    args = ap.parse_args(argv)
    if args.procs < 1 or not 0 < args.seconds <= 24 * 3600:
        ap.error("-n must be >= 1 and -t in (0, 86400] seconds")
    start = time.monotonic()
    deadline = start + args.seconds
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_spin, args=(os.getpid(), deadline), daemon=True)
             for _ in range(args.procs)]
    for p in procs:
        p.start()

    def stop(signum, frame):
        for p in procs:
            p.kill()
        print(f"load: stopped by signal {signum} after {time.monotonic() - start:.0f} s",
              file=sys.stderr, flush=True)
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"load: {args.procs} busy processes for {args.seconds:.0f} s (pid {os.getpid()})",
          file=sys.stderr, flush=True)
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()) + 2.0)
        if p.is_alive():
            p.kill()
    print(f"load: done after {time.monotonic() - start:.0f} s, load average "
          f"{os.getloadavg()[0]:.1f}", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
