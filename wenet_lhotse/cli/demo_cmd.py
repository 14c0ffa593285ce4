"""``wenet-lhotse demo``: the whole flow on a generated corpus, in minutes on a CPU."""

from __future__ import annotations

import click

from wenet_lhotse.cli.main import main


@main.command("demo")
@click.option("-o", "--out", "out_dir", type=click.Path(file_okay=False), default="demo_out",
              show_default=True, help="Where the corpus, manifests, models and plot go.")
@click.option("--quick", is_flag=True, help="A tiny run (about a minute) to check the setup.")
@click.option("-j", "--jobs", default=2, show_default=True, help="Processes for importing.")
def demo(out_dir, quick, jobs):
    """Generate a WeNet-format corpus, import it (cuts manifest and Shar), train a
    small CTC model through our loader once in one process and once with 2 DDP
    ranks, print per-epoch loss, throughput, padding and data-wait, and save
    OUT/demo.png. No downloads; a few minutes on 2 CPU cores."""
    import logging

    from wenet_lhotse.demo.run import FULL, QUICK, run_demo

    # The demo prints its own table; keep the library's INFO lines out of it.
    logging.getLogger("wenet_lhotse").setLevel(logging.WARNING)
    run_demo(out_dir, QUICK if quick else FULL, jobs=jobs, echo=click.echo)
