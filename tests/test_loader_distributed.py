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
    import time

    def slow():
        for i in range(3):
            time.sleep(0.05)
            yield i

    meter = DataWaitMeter()
    for _ in meter.wrap(slow()):
        time.sleep(0.01)
    assert meter.batches == 3
    assert 0.6 < meter.fraction < 1.0
    random.seed(0)
