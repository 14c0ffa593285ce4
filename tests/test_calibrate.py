"""``wenet-lhotse calibrate``: the batch-size search (doubling, then bisection to a relative
tolerance), and the search run on WeNet's own model and optimizer, built from a WeNet yaml
by WeNet's code, with the memory of each step measured (CPU: what autograd saves plus the
parameters, gradients and optimizer state; the CUDA measure needs a GPU)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from wenet_harness.runs import write_config
from wenet_lhotse.cli import main
from wenet_lhotse.dropin.calibrate import (
    SavedTensorMemory,
    bins_from,
    build_wenet_step,
    calibrate,
    largest_batch,
)
from wenet_lhotse.loader.lhotse_conf import LhotseConf


@pytest.mark.parametrize("seed", range(20))
def test_largest_batch_is_within_tolerance_of_the_true_limit(seed):
    rng = random.Random(seed)
    limit = rng.randint(1, 5000)
    start = rng.choice([1, 2, 7, 64, 10000])
    calls = []

    def fits(n):
        calls.append(n)
        return n <= limit

    n, trials = largest_batch(fits, start=start, rel_tol=0.05, limit=1 << 16)
    assert n <= limit and fits(n)  # never a size that does not fit
    assert limit - n <= max(1, int(0.05 * n))  # within 5% (or 1) of the limit
    assert trials == len(calls) - 1
    assert trials <= 2 * 17 + 2  # doubling then bisection: logarithmic


def test_largest_batch_edges():
    assert largest_batch(lambda n: False) == (0, 1)
    assert largest_batch(lambda n: False, start=8) == (0, 2)  # start, then 1
    assert largest_batch(lambda n: True, limit=100)[0] == 100
    with pytest.raises(ValueError):
        largest_batch(lambda n: True, start=0)


def test_bins_come_from_the_option_or_the_yaml_and_are_checked():
    conf = {"dataset_conf": {"lhotse_conf": {"bucket_bins_2d": [[2, 10], [4.5, 20]]}}}
    assert bins_from(conf, None) == [(2.0, 10), (4.5, 20)]
    assert bins_from({}, [[1, 3]]) == [(1.0, 3)]
    with pytest.raises(ValueError, match="dataset_conf.lhotse_conf.bucket_bins_2d"):
        bins_from({}, None)
    with pytest.raises(ValueError, match=r"bucket_bins_2d\[1\]"):
        bins_from({}, [[1, 3], [0, 2]])


@pytest.fixture(scope="module")
def wenet_yaml(tmp_path_factory, wenet_root):
    from wenet_harness import import_wenet

    import_wenet("wenet.utils.init_model", "wenet.utils.train_utils",
                 "wenet.utils.init_tokenizer")
    root = tmp_path_factory.mktemp("calibrate")
    units = root / "units.txt"
    units.write_text("<blank> 0\n<unk> 1\n" + "".join(
        f"{c} {i + 2}\n" for i, c in enumerate("abcdefghij")) + "<sos/eos> 12\n",
        encoding="utf-8")
    conf = write_config(root / "train.yaml", units, dataset_conf={
        "speed_perturb": True,
        "lhotse_conf": {"bucket_bins_2d": [[1.0, 5], [2.0, 10], [2.0, 20]]}})
    return conf


def test_search_on_wenets_model_finds_the_largest_fitting_batch(wenet_yaml):
    """WeNet's model from the yaml (WeNet's init_model, its Adam), the memory of each step
    measured: every bucket's batch fits, 5% more (at least one more) does not, and a
    bucket larger in both dimensions gets no larger batch."""
    configs = yaml.safe_load(Path(wenet_yaml).read_text(encoding="utf-8"))
    step = build_wenet_step(configs, device="cpu")
    assert step.vocab_size == 13 and step.input_dim == 20
    # speed_perturb: frames of the slowest factor (0.9): 1 s -> 1.111 s -> 109 frames
    assert step.frames(1.0) == 109
    memory = SavedTensorMemory(4 << 20, step.model, step.optimizer)
    buckets = bins_from(configs, None)
    results = calibrate(step, memory, buckets, rel_tol=0.05, limit=512)
    sizes = [r.batch_size for r in results]
    assert all(n >= 1 for n in sizes), sizes
    assert sizes[0] >= sizes[1] >= sizes[2], sizes
    for r in results:
        ok, peak = memory.fits(lambda r=r: step.run(r.batch_size, r.bucket))
        assert ok and peak <= memory.budget
        more = r.batch_size + max(1, int(0.05 * r.batch_size))
        assert not memory.fits(lambda r=r, more=more: step.run(more, r.bucket))[0]


def test_cli_writes_a_snippet_the_loader_accepts(wenet_yaml, tmp_path):
    out = tmp_path / "batch_sizes.yaml"
    bins = tmp_path / "bins.json"
    bins.write_text('{"bucket_bins_2d": [[1.5, 8], [3, 12]], "num_cuts": 10}',
                    encoding="utf-8")
    res = CliRunner().invoke(main, ["calibrate", "--config", str(wenet_yaml), "--bins",
                                    str(bins), "--device", "cpu", "--memory-bytes", "3M",
                                    "-o", str(out)])
    assert res.exit_code == 0, res.output
    doc = yaml.safe_load(out.read_text(encoding="utf-8"))
    lconf = doc["dataset_conf"]["lhotse_conf"]
    assert lconf["bucket_bins_2d"] == [[1.5, 8], [3, 12]]
    conf = LhotseConf.from_dict(lconf)
    assert len(conf.bucket_batch_sizes_2d) == 2 and min(conf.bucket_batch_sizes_2d) >= 1


@pytest.mark.parametrize("args, message", [
    (["--device", "cpu"], "give --memory-bytes"),
    (["--device", "cpu", "--memory-bytes", "lots"], "expected a size like 8G"),
    (["--device", "cpu", "--memory-bytes", "1k"], "not even one utterance of bucket"),
])
def test_cli_mistakes_are_one_line(wenet_yaml, args, message):
    res = CliRunner().invoke(main, ["calibrate", "--config", str(wenet_yaml), *args])
    assert res.exit_code != 0
    assert message in res.output and "Traceback" not in res.output, res.output


def test_cli_without_bins_names_the_yaml_key(tmp_path):
    conf = tmp_path / "train.yaml"
    conf.write_text("dataset_conf: {}\n", encoding="utf-8")
    res = CliRunner().invoke(main, ["calibrate", "--config", str(conf), "--device", "cpu",
                                    "--memory-bytes", "1G"])
    assert res.exit_code == 1
    assert "dataset_conf.lhotse_conf.bucket_bins_2d" in res.output, res.output
    assert len(res.output.strip().splitlines()) == 1
