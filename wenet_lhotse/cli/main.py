"""The ``wenet-lhotse`` command group; subcommands live in sibling modules."""

from __future__ import annotations

import logging

import click


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-v", "--verbose", count=True, help="More log output (-v info, -vv debug).")
def main(verbose: int) -> None:
    """WeNet data on Lhotse: import/export WeNet data.list and tar shards, check
    and describe data, and train WeNet models with Lhotse's samplers.

    \b
    Typical first steps:
      wenet-lhotse demo --quick              # the whole flow on generated data
      wenet-lhotse corpus demo_data          # make a small WeNet-format corpus
      wenet-lhotse validate demo_data/data.list
      wenet-lhotse import demo_data/data.list -o demo_data/cuts.jsonl.gz
      wenet-lhotse bench --data demo_data/cuts.jsonl.gz --units demo_data/units.txt

    Run 'wenet-lhotse COMMAND --help' for each command's options.
    """
    level = logging.WARNING - 10 * verbose
    logging.basicConfig(level=max(level, logging.DEBUG),
                        format="%(levelname)s %(name)s: %(message)s")
