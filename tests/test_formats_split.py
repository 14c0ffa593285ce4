"""formats.split: every (rank, worker) pair gets its own items, all together every item once."""

from __future__ import annotations

import pytest

from wenet_lhotse.formats.split import reader_share


@pytest.mark.parametrize("world,workers", [(1, 1), (2, 3), (3, 2), (4, 4)])
def test_every_item_exactly_once(world, workers):
    items = list(range(23))
    shares = [reader_share(items, r, world, w, workers)
              for r in range(world) for w in range(workers)]
    assert sorted(x for s in shares for x in s) == items
    assert reader_share(items, 1 % world, world, 0, workers) == items[1 % world::world][::workers]


def test_a_bad_split_is_refused():
    with pytest.raises(ValueError, match="bad split: rank 2/2, worker 0/1"):
        reader_share([1, 2], 2, 2)
    with pytest.raises(ValueError, match="worker 3/3"):
        reader_share([1, 2], 0, 1, 3, 3)
