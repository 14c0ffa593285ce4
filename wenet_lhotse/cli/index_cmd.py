"""``wenet-lhotse index``: the index that lets a shard list be sampled exactly, by
member offset (:mod:`wenet_lhotse.convert.index`)."""

from __future__ import annotations

import click

from wenet_lhotse.cli.data import (
    InputPath,
    _fail,
    cluster_option,
    jobs_option,
)
from wenet_lhotse.cli.main import main, policy_options, refuse_output_is_input


@main.command("index")
@click.argument("path", metavar="LIST|SHAR|CUTS", type=InputPath(exists=True))
@jobs_option("Processes reading tars in parallel (one tar per task).")
@click.option("--cache-dir", type=click.Path(file_okay=False), default=None,
              help="Write the index here instead of beside the list (read-only or remote "
                   "data); give the same directory as lhotse_conf.shard_index.")
@click.option("-o", "--out", type=click.Path(dir_okay=False), default=None,
              help="The index file to write [default: <list>.index, or in --cache-dir].")
@click.option("--full", is_flag=True,
              help="Read every tar again (default: only tars new or changed since the "
                   "last run).")
@cluster_option
@policy_options()
def index_cmd(path, jobs, cache_dir, out, full, cluster, policy):
    """Index PATH so that training samples it exactly (every utterance once per epoch,
    equal steps on every rank) and reads audio by offset for emitted batches only.

    \b
    A WeNet shard list: each tar is read once (local, s3://, http(s)://); the index
    (utterance offsets, durations, texts, each tar's fingerprint) goes beside the list
    as <list>.index. A rerun reads only new or changed tars. Training with the drop-in
    or build_dataloader uses the index whenever it exists.
      wenet-lhotse index data/train/shards.list -j 8
    A raw data.list: its audio headers are probed and cached (lhotse_conf.probe_cache).
    A cuts manifest or Shar directory is its own index (nothing to do).
    """
    from wenet_lhotse.convert.executor import ClusterError
    from wenet_lhotse.convert.index import index_input
    from wenet_lhotse.errors import WenetDataError

    refuse_output_is_input(out, path)
    refuse_output_is_input(cache_dir, path, option="--cache-dir")
    try:
        click.echo(index_input(str(path), cache_dir=cache_dir, out=out, num_jobs=jobs,
                               cluster=cluster, policy=policy,
                               progress=True,
                               full=full))
    except (WenetDataError, ValueError, ClusterError) as err:
        raise _fail(err) from None
