"""``wenet-lhotse corpus``: write the synthetic WeNet-format corpus."""

from __future__ import annotations

import click

from wenet_lhotse.cli.main import main


@main.command("corpus")
@click.argument("out_dir", type=click.Path(file_okay=False))
@click.option("-n", "--num-utterances", default=50, show_default=True, help="Number of utterances.")
@click.option("--shard-size", default=None, type=int,
              help="Also write WeNet tar shards of this many utterances.")
@click.option("--sampling-rate", default=16000, show_default=True, help="Audio sampling rate (Hz).")
@click.option("--min-duration", default=1.0, show_default=True,
              help="Shortest utterance (seconds).")
@click.option("--max-duration", default=6.0, show_default=True, help="Longest utterance (seconds).")
@click.option("--duration-dist", type=click.Choice(["uniform", "realistic"]), default="uniform",
              show_default=True, help="Duration distribution; 'realistic' is AISHELL-like.")
@click.option("--seed", default=0, show_default=True)
def corpus(out_dir, num_utterances, shard_size, sampling_rate, min_duration, max_duration,
           duration_dist, seed):
    """Write a small synthetic corpus in WeNet format to OUT_DIR (no downloads):
    wav/, data.list, text, wav.scp, units.txt and, with --shard-size, shards."""
    from wenet_lhotse.corpus import generate_corpus

    paths = generate_corpus(out_dir, num_utterances=num_utterances, sampling_rate=sampling_rate,
                            min_duration=min_duration, max_duration=max_duration,
                            duration_dist=duration_dist, shard_size=shard_size, seed=seed)
    click.echo(f"{len(paths.keys)} utterances, {paths.total_duration / 3600:.3f} h")
    click.echo(f"raw list:   {paths.data_list}")
    click.echo(f"symbols:    {paths.units}")
    if paths.shards_list:
        click.echo(f"shard list: {paths.shards_list}")
