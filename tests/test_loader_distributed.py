"""loader.distributed: cv partition and data-wait metering."""

from __future__ import annotations

import random

import pytest
from lhotse import CutSet

from wenet_lhotse.loader.distributed import DataWaitMeter, plan_partition


def test_plan_partition_splits_largest_batches(data):
    cuts = list(data["cuts"])
    plan = plan_partition([CutSet.from_cuts(cuts[:5]), CutSet.from_cuts(cuts[5:6]),
                           CutSet.from_cuts(cuts[6:7])], 2)
    assert len(plan) == 4
    assert [c.id for b in plan for c in b] == [c.id for c in cuts[:7]]
    with pytest.raises(ValueError, match="fewer than"):
        plan_partition([CutSet.from_cuts(cuts[:1])], 2)


def test_data_wait_meter():
    """wait = time inside ``next()``, work = time between: a clock the test advances
    itself (0.05 s per batch fetched, 0.01 s per step), so the fraction is exact on a
    loaded machine too."""
    now = [100.0]

    def slow():
        for i in range(3):
            now[0] += 0.05  # the loader's wait
            yield i

    meter = DataWaitMeter(clock=lambda: now[0])
    for _ in meter.wrap(slow()):
        now[0] += 0.01  # the step's work
    assert meter.batches == 3
    assert meter.wait == pytest.approx(0.15)
    assert meter.total == pytest.approx(0.17)  # the last return, not the StopIteration
    assert meter.fraction == pytest.approx(0.15 / 0.17)
    assert "3 batches, waited 0.15 s of 0.17 s (88.2% data wait)" == meter.summary()
    random.seed(0)
