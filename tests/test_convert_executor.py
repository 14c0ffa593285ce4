"""Executor selection and the bounded submit loop, on a real Dask scheduler with two
worker processes (started by the ``dask_cluster`` fixture on 127.0.0.1)."""

from __future__ import annotations

import os
import time

import pytest

from wenet_lhotse.convert.executor import ClusterError, bounded_map, open_executor


def square_pid(x: int):
    time.sleep(0.05)
    return x * x, os.getpid()


@pytest.mark.parametrize("ordered", [True, False])
def test_bounded_map_on_dask(dask_cluster, ordered):
    with open_executor(cluster=dask_cluster.address) as ex:
        got = list(bounded_map(square_pid, range(20), ex, ordered=ordered))
    if ordered:
        assert [j for j, _ in got] == list(range(20))
    assert sorted((j, r[0]) for j, r in got) == [(i, i * i) for i in range(20)]
    worker_pids = {p.pid for p in dask_cluster.workers}
    assert {r[1] for _, r in got} == worker_pids  # both worker processes did work


def test_local_pool_and_inline():
    with open_executor(num_jobs=2) as ex:
        got = list(bounded_map(square_pid, range(6), ex, window=3))
    assert [r[0] for _, r in got] == [i * i for i in range(6)]
    assert os.getpid() not in {r[1] for _, r in got}
    with open_executor(num_jobs=1) as ex:
        assert ex is None
        assert [r[1] for _, r in bounded_map(square_pid, range(2), ex)] == [os.getpid()] * 2


def test_unreachable_scheduler_is_one_line():
    from servers import free_port

    with pytest.raises(ClusterError, match=r"^cannot reach the Dask scheduler at tcp://") as e:
        with open_executor(cluster=f"tcp://127.0.0.1:{free_port()}", timeout=2):
            pass
    assert "\n" not in str(e.value)
