"""``wenet-lhotse plot EXP_DIR``: a PNG of a WeNet training run (loss, cv loss, learning
rate, data wait, throughput) from its tensorboard event files and log."""

from __future__ import annotations

from pathlib import Path

import click

from wenet_lhotse.cli.main import main


@main.command("plot")
@click.argument("exp_dir", type=click.Path(exists=True, file_okay=False))
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
              help="The PNG to write [default: EXP_DIR/train.png].")
@click.option("--log", "log", type=click.Path(exists=True, dir_okay=False), default=None,
              help="train.py's log (its stderr) [default: EXP_DIR/train.log when present].")
@click.option("--tensorboard-dir", type=click.Path(exists=True, file_okay=False),
              default=None, help="Where the event files are [default: EXP_DIR and "
              "WeNet's tensorboard/<basename of EXP_DIR> in the working directory].")
def plot(exp_dir, output, log, tensorboard_dir):
    """Draw a training run of WeNet's train.py: train and cv loss, learning rate (from
    WeNet's tensorboard files, read without TensorFlow), data wait and throughput (from
    the progress lines of its log). Needs matplotlib (extra plot)."""
    from wenet_lhotse.dropin.plot import PLOT_HINT, plot_run, read_run

    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise click.ClickException(f"plotting needs matplotlib: {PLOT_HINT}") from None
    exp = Path(exp_dir)
    curves = read_run(exp, Path(log) if log else None,
                      Path(tensorboard_dir) if tensorboard_dir else None)
    if curves.empty():
        raise click.ClickException(
            f"{exp_dir}: no tensorboard event files (in it, or in tensorboard/{exp.name}: "
            "give --tensorboard-dir) and no train.log with WeNet's lines (give --log)")
    out = plot_run(curves, Path(output) if output else exp / "train.png", title=str(exp))
    click.echo(f"wrote {out} (from {', '.join(curves.sources)})")
