"""io.parallel: results in input order, bounded in flight, any pool size."""

from __future__ import annotations

import functools
import threading

import pytest
from adversarial import wait_until

from wenet_lhotse.io.parallel import map_bounded


def _square(x: int) -> int:
    return x * x


@pytest.mark.parametrize("num_workers,executor", [(0, "process"), (1, "thread"),
                                                  (2, "process"), (3, "thread")])
def test_results_in_input_order(num_workers, executor):
    got = list(map_bounded(_square, iter(range(40)), num_workers, executor=executor))
    assert got == [(i, i * i) for i in range(40)]


def test_at_most_twice_the_workers_are_in_flight():
    pulled = []

    def items():
        for i in range(30):
            pulled.append(i)
            yield i

    lock = threading.Lock()
    with lock:  # the first item cannot finish while we hold the lock
        def wait_then(x):
            with lock:
                return x
        it = map_bounded(wait_then, items(), 2, executor="thread")
        result = []
        t = threading.Thread(target=lambda: result.append(next(it)))
        t.start()
        # the first 4 pulls are waited for (a loaded machine may take more than a fixed
        # half second to make them); then the loop has time to pull more, were it not
        # bounded: 2 * num_workers submitted, none done, the loop blocked on item 0
        wait_until(lambda: len(pulled) >= 4, 30, "the loop's first submissions")
        t.join(0.2)
        assert len(pulled) == 4 and t.is_alive()
    t.join()
    assert result == [(0, 0)]
    assert [r for _, r in it] == list(range(1, 30))


def test_an_error_reaches_the_caller():
    def boom(x):
        if x == 3:
            raise ValueError("item 3")
        return x

    with pytest.raises(ValueError, match="item 3"):
        list(map_bounded(boom, range(10), 2, executor="thread"))
    with pytest.raises(ValueError, match="item 3"):
        list(map_bounded(functools.partial(boom), range(10), 0))
