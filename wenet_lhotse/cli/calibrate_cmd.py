"""``wenet-lhotse calibrate``: per-bucket batch sizes fitted to the accelerator's memory,
found by training steps of the user's WeNet model (:mod:`wenet_lhotse.dropin.calibrate`)."""

from __future__ import annotations

import json
import re

import click

from wenet_lhotse.cli.main import main, show_progress

_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_bytes(value: str) -> int:
    """``"512M"``, ``"8G"``, ``"1.5g"``, ``"123456"`` -> bytes (binary units).

    >>> parse_bytes("8G"), parse_bytes("512m"), parse_bytes("100")
    (8589934592, 536870912, 100)
    """
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgtKMGT]?)(?:i?[bB])?\s*", str(value))
    if not m or float(m.group(1)) <= 0:
        raise ValueError(f"expected a size like 8G, 512M or a number of bytes > 0, "
                         f"got {value!r}")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def _bytes_option(ctx, param, value):
    if value is None:
        return None
    try:
        return parse_bytes(value)
    except ValueError as e:
        raise click.BadParameter(str(e), ctx=ctx, param=param) from None


def _load(path: str, option: str) -> dict:
    """A yaml (or JSON) mapping, or a one-line usage error naming the option."""
    from wenet_lhotse.formats.yaml_load import bounded_safe_load

    with open(path, encoding="utf-8") as f:
        doc = bounded_safe_load(f)
    if not isinstance(doc, dict):
        raise click.UsageError(f"{option} {path}: expected a yaml mapping")
    return doc


@main.command("calibrate")
@click.option("--config", "config_path", required=True,
              type=click.Path(exists=True, dir_okay=False),
              help="WeNet training yaml (the model, optimizer, features and tokenizer "
                   "are built from it as WeNet's train.py builds them).")
@click.option("--bins", "bins_path", type=click.Path(exists=True, dir_okay=False),
              default=None, help="JSON or yaml with bucket_bins_2d (estimate-bins' "
                                 "output); default: the yaml's lhotse_conf.bucket_bins_2d.")
@click.option("--device", default=None,
              help="Device to calibrate on (default: cuda when available, else cpu).")
@click.option("--memory-fraction", type=click.FloatRange(0.05, 1.0), default=0.9,
              show_default=True, help="CUDA: share of the card's memory a step may peak at.")
@click.option("--memory-bytes", callback=_bytes_option, default=None,
              help="Budget per step (e.g. 8G) measured from what autograd saves plus "
                   "parameters, gradients and optimizer state; required off CUDA.")
@click.option("--dtype", type=click.Choice(["fp32", "fp16", "bf16"]), default="fp32",
              show_default=True, help="Autocast dtype of the step (WeNet's --dtype).")
@click.option("--rel-tol", type=click.FloatRange(0.0, 0.5), default=0.05,
              show_default=True, help="Stop bisecting when the gap is this share.")
@click.option("--max-batch", type=click.IntRange(1, 1 << 20), default=4096,
              show_default=True, help="Largest batch size tried.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
              help="Write the yaml snippet here (default: print it).")
def calibrate_cmd(config_path, bins_path, device, memory_fraction, memory_bytes, dtype,
                  rel_tol, max_batch, output):
    """For each 2D bucket, the largest batch that trains one step of the WeNet model
    (forward, backward, optimizer) within the memory budget: doubled, then bisected to
    --rel-tol (an out-of-memory search over real steps). Prints (or writes) the
    lhotse_conf snippet with bucket_bins_2d and bucket_batch_sizes_2d."""
    import torch
    from tqdm import tqdm

    from wenet_lhotse.cli.main import refuse_output_is_input
    from wenet_lhotse.dropin.calibrate import (
        CudaMemory,
        SavedTensorMemory,
        bins_from,
        build_wenet_step,
        calibrate,
        snippet,
    )
    from wenet_lhotse.io.streams import atomic_output

    refuse_output_is_input(output, config_path, bins_path)
    configs = _load(config_path, "--config")
    bins = None
    if bins_path is not None:
        bins_doc = _load(bins_path, "--bins")
        bins = bins_doc.get("bucket_bins_2d") if isinstance(bins_doc, dict) else bins_doc
        if bins is None:
            raise click.UsageError(f"--bins {bins_path}: no bucket_bins_2d in it")
    buckets = bins_from(configs, bins, bins_path or config_path)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise click.UsageError(f"--device {device}: torch sees no CUDA device here "
                               "(use --device cpu with --memory-bytes for a dry run)")
    if not device.startswith("cuda") and memory_bytes is None:
        raise click.UsageError(f"--device {device}: give --memory-bytes (the budget per "
                               "step off CUDA, e.g. 8G)")
    try:
        step = build_wenet_step(configs, device=device, dtype=dtype)
    except ImportError as e:
        raise click.ClickException(str(e)) from None
    if device.startswith("cuda") and memory_bytes is None:
        memory = CudaMemory(device, memory_fraction)
        how = f"{torch.cuda.get_device_name(device)}, peak <= {memory_fraction:g} of memory"
    else:
        memory = SavedTensorMemory(memory_bytes, step.model, step.optimizer)
        how = f"{device}, saved tensors + state <= {memory_bytes} bytes"
    bar = tqdm(total=len(buckets), desc="calibrate", unit="bucket",
               disable=not show_progress())
    results = calibrate(step, memory, buckets, rel_tol=rel_tol, limit=max_batch,
                        progress=lambda r: bar.update(1))
    bar.close()
    for r in results:
        peak = "-" if r.peak_bytes is None else f"{r.peak_bytes / (1 << 20):.1f} MiB"
        click.echo(f"bucket {r.bucket[0]:g} s x {r.bucket[1]} tokens: batch {r.batch_size}"
                   f" (peak {peak}, {r.trials} steps)", err=True)
    empty = [r.bucket for r in results if r.batch_size == 0]
    if empty:
        raise click.ClickException(f"not even one utterance of bucket {list(empty[0])} "
                                   f"fits the budget ({how})")
    text = snippet(results, header=f"wenet-lhotse calibrate --config {config_path}: {how}, "
                                   f"dtype {dtype}, rel-tol {rel_tol:g}")
    if output:
        with atomic_output(output, "w", encoding="utf-8") as f:
            f.write(text)
        click.echo(f"wrote {output}", err=True)
    else:
        click.echo(text, nl=False)
    click.echo(json.dumps({"bucket_batch_sizes_2d": [r.batch_size for r in results]}),
               err=True)
