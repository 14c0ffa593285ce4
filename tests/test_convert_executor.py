"""Where conversion tasks run, through the one bounded submit loop: a real Dask
scheduler with two worker processes (``dask_cluster`` fixture, 127.0.0.1), a local
process pool, or inline."""

from __future__ import annotations

import os
import time

import pytest

from wenet_lhotse.convert.executor import ClusterError, map_tasks


def square_pid(x: int):
    time.sleep(0.05)
    return x * x, os.getpid()


def test_map_tasks_on_dask(dask_cluster):
    for ordered in (True, False):
        got = list(map_tasks(square_pid, range(20), cluster=dask_cluster.address,
                             ordered=ordered))
        if ordered:
            assert [j for j, _ in got] == list(range(20))
        assert sorted((j, r[0]) for j, r in got) == [(i, i * i) for i in range(20)]
        worker_pids = {p.pid for p in dask_cluster.workers}
        assert {r[1] for _, r in got} == worker_pids  # both worker processes did work


def test_local_pool_and_inline():
    got = list(map_tasks(square_pid, range(6), num_jobs=2, ordered=False))
    assert sorted(r[0] for _, r in got) == [i * i for i in range(6)]
    assert os.getpid() not in {r[1] for _, r in got}
    assert [r[1] for _, r in map_tasks(square_pid, range(2))] == [os.getpid()] * 2


def test_unreachable_scheduler_is_one_line():
    from servers import free_port

    with pytest.raises(ClusterError, match=r"^cannot reach the Dask scheduler at tcp://") as e:
        list(map_tasks(square_pid, range(2), cluster=f"tcp://127.0.0.1:{free_port()}",
                       timeout=2))
    assert "\n" not in str(e.value)
