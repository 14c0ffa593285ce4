"""``wenet-lhotse cmvn``: WeNet's ``global_cmvn`` JSON from any input, in parallel."""

from __future__ import annotations

import click

from wenet_lhotse.cli.data import InputPath, _print_skips, cluster_option, jobs_option
from wenet_lhotse.cli.main import main, policy_options, refuse_output_is_input, show_progress

#: The features without a yaml: WeNet's aishell and librispeech recipes' dataset_conf.
RECIPE_FEATURES = {"resample_conf": {"resample_rate": 16000},
                   "fbank_conf": {"num_mel_bins": 80, "frame_shift": 10, "frame_length": 25}}


@main.command("cmvn")
@click.argument("source", metavar="INPUT", type=InputPath(exists=True))
@click.option("-c", "--config", "config_path", type=click.Path(exists=True, dir_okay=False),
              default=None,
              help="WeNet training yaml: its dataset_conf gives the features "
                   "(fbank_conf, feats_type) and resample_conf [default: WeNet's aishell "
                   "and librispeech recipes' 80-bin fbank, 25/10 ms, at 16 kHz].")
@click.option("-o", "--out", type=click.Path(dir_okay=False), required=True,
              help="The global_cmvn JSON to write (cmvn_conf.cmvn_file in the yaml).")
@jobs_option("Worker processes.")
@click.option("--chunk-size", type=int, default=64, show_default=True,
              help="Utterances per task for raw lists and cuts manifests (a tar or a "
                   "Shar shard is one task).")
@click.option("--wav-root", type=click.Path(file_okay=False), default=None,
              help="Directory that relative 'wav' paths of a raw list resolve against "
                   "[default: the current directory, as WeNet does].")
@policy_options(skip_errors=("--skip-errors", "Skip unreadable utterances (each is logged "
                                               "and counted) instead of stopping at the "
                                               "first one."))
@cluster_option
def cmvn_cmd(source, config_path, out, jobs, chunk_size, wav_root, cluster, policy):
    """Compute WeNet's global CMVN statistics (what WeNet's tools/compute_cmvn_stats.py
    writes: mean_stat, var_stat, frame_num) over every utterance of INPUT.

    INPUT is a WeNet raw list, a shard list, a cuts manifest, a Shar directory or any
    other input kind that is detected (docs/formats.md).
    Features are the yaml's (fbank_conf with dither 0), after its resample_conf;
    the file is written atomically.

    \b
    Example:
      wenet-lhotse cmvn data/train/data.list -c conf/train_conformer.yaml \\
          -o data/train/global_cmvn -j 8
    """
    from wenet_lhotse.convert.cmvn import CmvnConfig, compute_cmvn, write_cmvn
    from wenet_lhotse.convert.executor import ClusterError
    from wenet_lhotse.loader.config_check import load_wenet_yaml

    refuse_output_is_input(out, source, config_path)
    if config_path is not None:
        dataset_conf = load_wenet_yaml(config_path).get("dataset_conf")
    else:
        dataset_conf = RECIPE_FEATURES
    config = CmvnConfig.from_wenet(dataset_conf)
    report = policy.skip_report
    try:
        stats = compute_cmvn(source, config=config, num_jobs=max(1, jobs),
                             chunk_size=chunk_size, policy=policy,
                             wav_root=wav_root, progress=show_progress(), cluster=cluster)
    except ClusterError as err:
        raise click.ClickException(str(err)) from None
    path = write_cmvn(stats, out)
    _print_skips(report)
    click.echo(f"global_cmvn: {path} ({stats.num_utts} utterances, {stats.frame_num} frames, "
               f"dim {len(stats.mean_stat)}, {len(report)} skipped)")
