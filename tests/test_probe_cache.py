"""Raw-list header probing split across real torchrun ranks (gloo), cached by content."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from lhotse import CutSet
from servers import free_port

from wenet_lhotse.errors import SkipReport, WenetDataError
from wenet_lhotse.formats import read_raw_list
from wenet_lhotse.io.policy import ReadPolicy
from wenet_lhotse.sources.probe_cache import BLOCK_LINES, probed_raw_list

HERE = Path(__file__).parent


@pytest.fixture
def long_list(corpus, tmp_path):
    """4 blocks of lines over the corpus's real WAVs (distinct keys), one bad line."""
    items = [json.loads(x) for x in corpus.data_list.read_text().splitlines()]
    lines = []
    for i in range(4 * BLOCK_LINES - 1):
        it = items[i % len(items)]
        lines.append(json.dumps({**it, "key": f"{it['key']}-{i}"}, ensure_ascii=False))
    lines.insert(700, json.dumps({"key": "gone", "wav": str(tmp_path / "missing.wav")}))
    path = tmp_path / "data.list"
    path.write_text("\n".join(lines) + "\n")
    return path


def _torchrun(lst: Path, out: Path):
    out.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
           f"--master_port={free_port()}", "--master_addr=127.0.0.1",
           str(HERE / "ddp_probe.py"), str(lst), str(out)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(HERE.parent)}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]


def test_strict_names_the_bad_line(long_list):
    with pytest.raises(WenetDataError, match=r"data\.list:701: audio file not found"):
        probed_raw_list(long_list)


@pytest.mark.slow
def test_two_ranks_probe_half_each_then_the_cache(long_list, tmp_path):
    good = long_list.with_name("good.list")
    good.write_text("".join(x + "\n" for x in long_list.read_text().splitlines()
                            if '"gone"' not in x))
    first = _torchrun(good, tmp_path / "run1")
    n = len(good.read_text().splitlines())
    assert [r["from_cache"] for r in first] == [False, False]
    assert sorted(r["lines_probed"] for r in first) == [n - 2 * BLOCK_LINES, 2 * BLOCK_LINES]
    assert first[0]["manifest"] == first[1]["manifest"]
    cached = list(CutSet.from_jsonl_lazy(first[0]["manifest"]))
    direct = list(read_raw_list(good))
    assert [c.to_dict() for c in cached] == [c.to_dict() for c in direct]
    again = _torchrun(good, tmp_path / "run2")
    assert [(r["from_cache"], r["lines_probed"]) for r in again] == [(True, 0), (True, 0)]


def test_skips_are_cached_and_reported_again(long_list, tmp_path):
    report = SkipReport()
    res = probed_raw_list(long_list, policy=ReadPolicy(strict=False, skip_report=report))
    assert not res.from_cache and res.lines_probed == 4 * BLOCK_LINES
    assert [(i.line, i.kind) for i in report] == [(701, "missing_audio")]
    again = SkipReport()
    res2 = probed_raw_list(long_list, policy=ReadPolicy(strict=False, skip_report=again))
    assert res2.from_cache and res2.lines_probed == 0
    assert list(again) == list(report)
    # editing the list changes its key: the old cache is not used
    long_list.write_text(long_list.read_text() + "\n")
    res3 = probed_raw_list(long_list, policy=ReadPolicy(strict=False, skip_report=SkipReport()))
    assert not res3.from_cache and res3.manifest != res.manifest


def test_loader_with_probe_cache_gives_the_same_batches(corpus, tmp_path):
    from wenet_lhotse.loader.build import build_dataloader

    class Keys:
        def __getitem__(self, cuts):
            return [c.id for c in cuts]

    conf = {"batch_conf": {"batch_type": "dynamic", "max_frames_in_batch": 1500},
            "lhotse_conf": {"num_buckets": 2}}
    cached = {**conf, "lhotse_conf": {**conf["lhotse_conf"], "probe_cache": str(tmp_path)}}

    def batches(c):
        return list(build_dataloader(str(corpus.data_list), None, c, "train", dataset=Keys(),
                                     seed=3)[1])

    plain = batches(conf)
    assert not list(tmp_path.iterdir())
    assert batches(cached) == plain  # the first run writes the cache ...
    assert len(list(tmp_path.glob("data.list.probe-*.jsonl.gz"))) == 1
    assert batches(cached) == plain  # ... the second reads it


# ---------------------------------------------------------------- caches tied to their list


def _cuts_of(corpus, cache_dir, split="train", strict=True, report=None):
    from wenet_lhotse.loader.build import build_dataloader

    class Keys:
        def __getitem__(self, cuts):
            return [c.id for c in cuts]

    conf = {"batch_conf": {"batch_type": "static", "batch_size": 100},
            "lhotse_conf": {"probe_cache": str(cache_dir), "fault_tolerant": not strict}}
    _, loader = build_dataloader(str(corpus.data_list), None, conf, split, dataset=Keys(),
                                 seed=3)
    keys = sorted(k for b in loader for k in b)
    if report is not None:
        report.merge(loader.skip_report)
    return keys


def _rewrite_manifest(manifest: Path, lines) -> None:
    import gzip
    with gzip.open(manifest, "wt") as f:
        f.writelines(lines)


def test_a_cache_shorter_than_its_list_is_rebuilt(corpus, tmp_path):
    """The issue: a cache holding 3 of the list's cuts was trusted (3 used, 0 skips)."""
    import gzip
    res = probed_raw_list(corpus.data_list, cache_dir=tmp_path)
    lines = gzip.open(res.manifest, "rt").readlines()
    assert len(lines) == len(corpus.keys) > 3
    _rewrite_manifest(res.manifest, lines[:3])
    again = probed_raw_list(corpus.data_list, cache_dir=tmp_path)
    assert not again.from_cache and again.manifest == res.manifest
    assert len(gzip.open(res.manifest, "rt").readlines()) == len(corpus.keys)
    assert _cuts_of(corpus, tmp_path) == sorted(corpus.keys)


def test_a_cut_short_cache_is_rebuilt_not_an_eoferror(corpus, tmp_path):
    res = probed_raw_list(corpus.data_list, cache_dir=tmp_path)
    data = res.manifest.read_bytes()
    res.manifest.write_bytes(data[: len(data) // 2])
    assert not probed_raw_list(corpus.data_list, cache_dir=tmp_path).from_cache
    assert probed_raw_list(corpus.data_list, cache_dir=tmp_path).from_cache
    assert _cuts_of(corpus, tmp_path, split="cv") == sorted(corpus.keys)


def _plant_command(corpus, cache_dir: Path, marker: Path, forge_sidecar: bool):
    """A cache under the list's predictable name whose first cut's audio is a shell
    command (touching ``marker``); ``forge_sidecar``: with a matching sidecar too."""
    import gzip

    from wenet_lhotse.sources import probe_cache as pc
    res = probed_raw_list(corpus.data_list, cache_dir=cache_dir)
    lines = [json.loads(x) for x in gzip.open(res.manifest, "rt")]
    lines[0]["recording"]["sources"] = [{"type": "command", "channels": [0],
                                         "source": f"touch {marker}; cat {corpus.root}/x"}]
    _rewrite_manifest(res.manifest, [json.dumps(x) + "\n" for x in lines])
    if forge_sidecar:
        size, sha = pc._digest(res.manifest)
        res.skips.write_text(json.dumps({"version": pc.CACHE_VERSION, "manifest_bytes": size,
                                         "manifest_sha256": sha, "skips": []}))
    return res


@pytest.mark.parametrize("split", ["train", "cv"])
def test_a_planted_cache_runs_no_command(corpus, tmp_path, split):
    """The issue: a planted cache with a `command` source ran on the cv split."""
    marker = tmp_path / "PWNED"
    _plant_command(corpus, tmp_path / "c1", marker, forge_sidecar=False)
    assert _cuts_of(corpus, tmp_path / "c1", split) == sorted(corpus.keys)  # rebuilt
    res = _plant_command(corpus, tmp_path / "c2", marker, forge_sidecar=True)
    with pytest.raises(WenetDataError) as e:
        _cuts_of(corpus, tmp_path / "c2", split)
    assert (e.value.source, e.value.line, e.value.kind) == (str(res.manifest), 1, "refused")
    report = SkipReport()
    assert _cuts_of(corpus, tmp_path / "c2", split, strict=False,
                    report=report) == sorted(corpus.keys[1:])
    assert report.counts() == {"refused": 1}
    assert not marker.exists()
