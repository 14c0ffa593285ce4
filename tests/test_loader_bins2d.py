"""loader.bins2d: 2D (duration x tokens) bins, their constraint under Lhotse's
DynamicBucketingSampler, lower target padding than 1D bins on varied text lengths
(bench/bucketing_2d.py), and the estimate-bins CLI."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
from pathlib import Path

import pytest

from wenet_lhotse.loader.bins2d import (
    Bucket2DConstraint,
    bucket_batch_sizes,
    estimate_bins_2d,
    select_bin,
)

ROOT = Path(__file__).resolve().parents[1]


def _bench():
    spec = importlib.util.spec_from_file_location("bucketing_2d", ROOT / "bench" /
                                                  "bucketing_2d.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_bins_hold_their_cuts_and_budget():
    bench = _bench()
    cuts = bench.corpus(3000, seed=2)
    durs = [c.duration for c in cuts]
    toks = [c.custom["num_tokens"] for c in cuts]
    bins = estimate_bins_2d(durs, toks, 6, 3)
    assert bins == sorted(bins) and len(bins) == 18
    for d, t in zip(durs, toks):  # every cut fits the bin it is put in
        b = bins[select_bin(bins, d, t)]
        assert d <= b[0] and t <= b[1]
    sizes = bucket_batch_sizes(bins, 100.0, max_tokens=400)
    assert all(s * d <= 100.0 and s * t <= 400 or s == 1 for s, (d, t) in zip(sizes, bins))
    con = Bucket2DConstraint(bins, sizes)
    for batch in bench.batches(cuts, con, bins):  # fixed size per bucket, one bucket each
        buckets = {select_bin(bins, c.duration, c.custom["num_tokens"]) for c in batch}
        assert len(buckets) == 1 and len(batch) <= sizes[buckets.pop()]


def test_2d_bins_pad_targets_less_than_1d():
    r = _bench().measure(4000, buckets=8, token_buckets=4, max_duration=120.0)
    (tp1, ap1, _), (tp2, ap2, _) = r["1d"], r["2d"]
    assert ap2 < ap1 + 0.05  # for a little more audio padding
    assert tp2 < 0.6 * tp1  # measured 0.38x at 20,000 cuts (docs/performance.md)
    assert ap2 < 0.2


def test_estimate_bins_cli(corpus):
    from cli_server import wenet_lhotse_cmd  # the CLI in its own process, forked

    res = subprocess.run([*wenet_lhotse_cmd(), "estimate-bins",
                          str(corpus.data_list), "--units", str(corpus.units),
                          "--num-buckets", "3", "--num-token-buckets", "2",
                          "--max-duration", "20"], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    bins, sizes = out["bucket_bins_2d"], out["bucket_batch_sizes_2d"]
    assert out["num_cuts"] == 20 and len(bins) == len(sizes) <= 6
    assert sizes == bucket_batch_sizes([tuple(b) for b in bins], 20.0)
    with pytest.raises(ValueError):
        estimate_bins_2d([], [], 3, 2)


class _KeysTokens:
    def __init__(self, tok):
        self.tok = tok

    def __getitem__(self, cuts):
        return [(c.id, c.duration, len(self.tok.tokenize(c.supervisions[0].text)[1]))
                for c in cuts]


@pytest.mark.parametrize("source", ["raw", "cuts"])
def test_loader_with_2d_bins_two_ranks_resume(corpus, data, source):
    """lhotse_conf.bucket_bins_2d in build_dataloader (map mode): every batch within one
    bin's batch size, every cut once over 2 ranks with equal steps, exact resume."""
    from wenet_lhotse import CharTokenizer
    from wenet_lhotse.loader.build import build_dataloader

    tok = CharTokenizer(corpus.units)
    cuts = list(data["cuts"])
    durs = [c.duration for c in cuts]
    toks = [len(tok.tokenize(c.supervisions[0].text)[1]) for c in cuts]
    bins = estimate_bins_2d(durs, toks, 2, 2)
    sizes = bucket_batch_sizes(bins, 8.0)
    conf = {"batch_conf": {"batch_type": "static", "batch_size": 4},
            "filter_conf": {"token_max_length": 1000},
            "lhotse_conf": {"bucket_bins_2d": [list(b) for b in bins],
                            "bucket_batch_sizes_2d": sizes, "buffer_size": 40}}
    path = str(data["raw"] if source == "raw" else data["manifest"])

    def make(rank):
        return build_dataloader(path, tok, conf, "train", dataset=_KeysTokens(tok),
                                world_size=2, rank=rank, seed=3)[1]

    ranks = [list(make(r)) for r in range(2)]
    assert len(ranks[0]) == len(ranks[1])
    assert sorted(k for r in ranks for b in r for k, _, _ in b) == sorted(c.id for c in cuts)
    single = 0
    for b in ranks[0] + ranks[1]:
        used = {select_bin(bins, d, t) for _, d, t in b}
        assert len(b) <= max(sizes[j] for j in used)  # the bin's batch size (or a merge's)
        single += len(used) == 1
    assert single >= len(ranks[0] + ranks[1]) // 2  # most batches hold one 2D bin
    ref = make(0)
    it = iter(ref)
    next(it)
    state = ref.state_dict()
    rest = list(it)
    fresh = make(0)
    fresh.load_state_dict(state)
    assert list(fresh) == rest
