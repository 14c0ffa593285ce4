"""loader.mux: ResumableMux draws what CutSet.mux draws."""

from __future__ import annotations

from collections import Counter

import pytest
from lhotse import CutSet
from loader_common import CONF, Keys

from wenet_lhotse.loader.build import build_dataloader
from wenet_lhotse.loader.mux import PositionedStream, ResumableMux
from wenet_lhotse.sources import SourceSpec, mux_sources
from wenet_lhotse.sources.positioned import JsonlReader


def test_resumable_mux_matches_cutset_mux(data):
    a, b = (CutSet.from_jsonl_lazy(p) for p in data["big"])
    lhotse_ids = [c.id for c in CutSet.mux(a, b, weights=[0.7, 0.3], seed=4)][:500]
    mux = ResumableMux([PositionedStream(JsonlReader([str(p)])) for p in data["big"]],
                       weights=[0.7, 0.3], seed=4)
    mux.start(0)
    assert [next(mux).id for _ in range(500)] == lhotse_ids


@pytest.mark.parametrize("which", ["ours", "lhotse"])
def test_mux_proportions_follow_weights(data, which):
    specs = [SourceSpec(path=str(data["big"][0]), weight=3, tags={"lang": "zh"}),
             SourceSpec(path=str(data["big"][1]), weight=1, tags={"lang": "en"})]
    if which == "ours":
        _, loader = build_dataloader(specs, None, CONF, "train", dataset=Keys(), seed=1)
        mux = loader.bucketing_sampler.mux
        mux.start(0)
        draws = [next(mux) for _ in range(2000)]
    else:
        from wenet_lhotse.sources import open_source

        cs = mux_sources([open_source(s) for s in specs], [s.weight for s in specs], seed=1)
        draws = list(cs.subset(first=2000))
    share = Counter(c.custom["lang"] for c in draws)["zh"] / 2000
    assert abs(share - 0.75) <= 0.03
