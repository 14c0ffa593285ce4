"""``wenet-lhotse bench``: run a configured training loader on your data and measure it."""

from __future__ import annotations

import time

import click

from wenet_lhotse.cli.main import main, policy_options, show_progress

#: ``dataset_conf`` used without CONFIG: WeNet's aishell recipe (train.yaml) settings.
AISHELL_DATASET_CONF = {
    "filter_conf": {"max_length": 40960, "min_length": 0, "token_max_length": 200,
                    "token_min_length": 1},
    "resample_conf": {"resample_rate": 16000},
    "speed_perturb": True,
    "fbank_conf": {"num_mel_bins": 80, "frame_shift": 10, "frame_length": 25, "dither": 0.1},
    "spec_aug": True,
    "spec_aug_conf": {"num_t_mask": 2, "num_f_mask": 2, "max_t": 50, "max_f": 10},
    "shuffle": True,
    "shuffle_conf": {"shuffle_size": 1500},
    "sort": True,
    "sort_conf": {"sort_size": 500},
    "batch_conf": {"batch_type": "static", "batch_size": 16},
}


@main.command("bench")
@click.argument("config", required=False, type=click.Path(exists=True, dir_okay=False))
@click.option("--data", "data", default=None,
              help="Train data (WeNet --train_data); default: lhotse_conf.sources of CONFIG.")
@click.option("--data-type", default="auto", show_default=True,
              type=click.Choice(["auto", "raw", "shard", "lhotse", "cuts", "shar"]),
              help="WeNet --data_type (plus lhotse/cuts and shar).")
@click.option("--units", default=None, type=click.Path(exists=True, dir_okay=False),
              help="Symbol table for a char tokenizer; default: CONFIG's tokenizer_conf.")
@click.option("-n", "--num-batches", default=50, show_default=True,
              help="Batches to draw (the epoch may end sooner).")
@click.option("--num-workers", default=2, show_default=True, help="DataLoader workers.")
@click.option("--prefetch", default=2, show_default=True, help="Batches prefetched per worker.")
@click.option("--seed", default=777, show_default=True)
@policy_options()
def bench(config, data, data_type, units, num_batches, num_workers, prefetch, seed, policy):
    """Run CONFIG's training loader (WeNet yaml: dataset_conf, tokenizer_conf) for N
    batches and print throughput (audio seconds per wall second; audio seconds are
    feature frames x frame shift), time to first batch, batch count, mean batch
    size and padding fraction (padded feature frames / all frames). Without CONFIG,
    WeNet's aishell dataset_conf is used (give --data and --units)."""
    from tqdm import tqdm

    from wenet_lhotse.loader.build import build_dataloader
    from wenet_lhotse.loader.config import frame_shift_ms
    from wenet_lhotse.loader.config_check import load_wenet_yaml
    from wenet_lhotse.loader.lhotse_conf import LhotseConf
    from wenet_lhotse.sources.detect import DATA_TYPES

    if config is not None:
        configs = load_wenet_yaml(config)  # stops on a bad dataset_conf, naming the key
    else:
        configs = {"dataset_conf": AISHELL_DATASET_CONF}
    dataset_conf = dict(configs.get("dataset_conf") or {})
    lconf = dataset_conf.get("lhotse_conf") or {}
    granted = LhotseConf.with_opt_ins(lconf, policy)  # --allow-pipe reaches the loader
    if granted != lconf:
        lconf = dataset_conf["lhotse_conf"] = granted
    if data is not None:
        sources = [{"path": data, "type": DATA_TYPES[data_type]}]
    elif lconf.get("sources"):
        sources = lconf["sources"]
    else:
        raise click.UsageError("give --data, or lhotse_conf.sources in CONFIG")
    if units is not None:
        from wenet_lhotse.text import CharTokenizer

        tokenizer = CharTokenizer(units)
    else:
        from wenet_lhotse.text import tokenizer_from_wenet_conf

        try:
            tokenizer = tokenizer_from_wenet_conf(configs)
        except ValueError as err:
            raise click.UsageError(f"{err}; or pass --units") from None

    t0 = time.perf_counter()
    cpu0 = time.process_time()
    _, loader = build_dataloader(sources, tokenizer, dataset_conf, "train",
                                 num_workers=num_workers, seed=seed,
                                 prefetch_factor=prefetch if num_workers else None)
    shift = frame_shift_ms(dataset_conf) / 1000.0
    first = None
    batches = cuts = frames = padded = 0
    with tqdm(total=num_batches, unit="batch", disable=not show_progress()) as bar:
        for batch in loader:
            if first is None:
                first = time.perf_counter() - t0
            lens = batch["feats_lengths"]
            batches += 1
            cuts += len(lens)
            frames += int(lens.sum())
            padded += len(lens) * int(batch["feats"].shape[1])
            bar.update(1)
            if batches >= num_batches:
                break
    wall = time.perf_counter() - t0
    if not batches:
        raise click.ClickException("the loader produced no batches")
    audio = frames * shift
    short = "" if batches >= num_batches else (
        f" (of -n {num_batches}: one epoch of this data has only {batches} batches; the "
        "bench reads one epoch)")
    click.echo(f"batches:            {batches}{short}")
    click.echo(f"utterances:         {cuts} (mean batch size {cuts / batches:.1f})")
    click.echo(f"audio:              {audio:.1f} s")
    click.echo(f"wall time:          {wall:.2f} s (first batch after {first:.2f} s)")
    click.echo(f"throughput:         {audio / wall:.1f} audio s/s")
    click.echo(f"padding:            {100 * (1 - frames / padded):.2f} % of frames")
    click.echo(f"main-process CPU:   {time.process_time() - cpu0:.2f} s")
