"""``wenet-lhotse import | export | validate | stats``: move WeNet data in and out of
Lhotse, check it, and describe it."""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Callable

import click

from wenet_lhotse.cli.main import main, policy_options, refuse_output_is_input, show_progress


class InputPath(click.Path):
    """A local path that must exist, or an object-store URL (``s3://...``), passed on
    unchecked (its reader reports a missing object in one line)."""

    def convert(self, value, param, ctx):
        from wenet_lhotse.io.remote import is_remote

        if isinstance(value, str) and is_remote(value):
            return value
        return super().convert(value, param, ctx)


CLUSTER_HELP = ("Run the work on a Dask cluster: the scheduler's address (tcp://HOST:8786). "
                "Workers must see the same input/output paths (shared filesystem or "
                "s3://). Needs the cluster extra: pip install -e '.[cluster]' in the clone.")


def _default_jobs() -> int:
    return max(1, min(4, os.cpu_count() or 1))


def jobs_option(help: str, default: Any = _default_jobs) -> Callable:
    """``-j/--jobs``: how many worker processes (default ``min(4, CPUs)``)."""
    return click.option("-j", "--jobs", type=int, default=default,
                        show_default="min(4, CPUs)" if default is _default_jobs else True,
                        help=help)


#: ``--cluster``: every command that can run its work on a Dask cluster takes it.
cluster_option = click.option("--cluster", default=None, metavar="tcp://HOST:PORT",
                              help=CLUSTER_HELP)


def _fail(err: Exception, hint: str = "") -> click.ClickException:
    """A one-line error for bad input (``hint`` on a second line, when it can help)."""
    kind = getattr(err, "kind", None)
    text = str(err).splitlines()[0] if str(err) else type(err).__name__
    if hint and kind not in ("refused", "format", "missing_file"):
        text += f"\n{hint}"
    return click.ClickException(text)


def _print_skips(report, limit: int = 20) -> None:
    items = list(report)
    for item in items[:limit]:
        click.echo(f"  skipped {item}", err=True)
    if len(items) > limit:
        click.echo(f"  ... and {len(items) - limit} more", err=True)
    if items:
        click.echo(report.summary(), err=True)


@main.command("import")
@click.argument("data_list", type=InputPath(exists=True))
@click.option("-o", "--out", type=click.Path(), default=None,
              help="Output cuts manifest for a raw list [default: cuts.jsonl.gz next to "
                   "DATA_LIST]. For a shard list (or with --shar) use --shar instead.")
@click.option("--data-type", type=click.Choice(["auto", "raw", "shard"]), default="auto",
              show_default=True,
              help="What DATA_LIST holds: JSON lines (raw) or tar paths/URLs (shard). "
                   "'auto' looks at the first line.")
@click.option("--shar", "shar_dir", type=click.Path(file_okay=False), default=None,
              help="Write a Lhotse Shar directory here (audio copied losslessly into tars). "
                   "Required for shard lists; optional for raw lists.")
@click.option("--shard-size", type=int, default=None,
              help="Utterances per Shar shard for a raw list [default: 1000]. A shard "
                   "list keeps one Shar shard per input tar.")
@click.option("--audio-format", default="lossless", show_default=True,
              type=click.Choice(["lossless", "copy", "flac", "wav", "original", "opus", "mp3"]),
              help="Shar audio encoding. 'lossless': decoded samples identical to the "
                   "source (FLAC for 16/24-bit PCM). 'copy': whole WAV/FLAC files stored "
                   "byte for byte (several times faster, no compression). opus/mp3 are lossy.")
@click.option("--wav-root", type=click.Path(file_okay=False), default=None,
              help="Directory that relative 'wav' paths resolve against "
                   "[default: the current directory, as WeNet does].")
@jobs_option("Worker processes (header probing for raw lists; one Shar shard per job).")
@policy_options(skip_errors=("--skip-errors", "Skip bad lines/members (each is logged and "
                                               "counted) instead of stopping at the first one."))
@cluster_option
def import_cmd(data_list, out, data_type, shar_dir, shard_size, audio_format, wav_root, jobs,
               cluster, policy):
    """Import a WeNet DATA_LIST into Lhotse.

    \b
    A raw list (JSON lines with key/wav/txt) becomes a cuts manifest whose
    recordings point at your original audio files (nothing is copied):
      wenet-lhotse import data/train/data.list -o data/train/cuts.jsonl.gz
    \b
    A shard list (one tar path or URL per line) becomes a Lhotse Shar directory
    (each input tar is read once; audio stored losslessly):
      wenet-lhotse import data/train/shards.list --shar data/train/shar -j 8
    \b
    Shar conversion is restartable: run the same command again after an
    interruption and only the unfinished shards are written.
    \b
    On a Dask cluster, to object storage:
      wenet-lhotse import s3://b/train/shards.list --shar s3://b/train/shar \\
          --cluster tcp://scheduler:8786
    """
    from wenet_lhotse.convert.executor import ClusterError
    from wenet_lhotse.errors import WenetDataError
    from wenet_lhotse.sources.detect import detect_input_kind
    from wenet_lhotse.sources.registry import get_kind

    if data_type == "auto":
        try:
            data_type = detect_input_kind(data_list)
        except WenetDataError as err:
            raise _fail(err) from None
    refuse_output_is_input(out, data_list)
    refuse_output_is_input(shar_dir, data_list, option="--shar")
    report = policy.skip_report
    kind = get_kind(data_type)
    refusal = kind.import_shar_refusal if shar_dir else kind.import_cuts_refusal
    if refusal:
        raise click.ClickException(f"{data_list}: {data_type} input: {refusal}")
    if os.path.isdir(data_list) and kind.wenet:
        raise click.ClickException(f"{data_list}: a directory, not a WeNet list")
    try:
        if not kind.wenet and shar_dir is None:
            _import_kind_to_cuts(kind, data_list, out, wav_root, policy)
            return
        tars = kind.lists_tars  # a list of tars: imported as Shar only
        if tars or shar_dir is not None:
            if shar_dir is None:
                raise click.UsageError(
                    "a shard list is imported as Lhotse Shar: pass --shar DIR "
                    "(e.g. --shar data/train/shar)")
            if out is not None:
                raise click.UsageError("-o/--out is for raw -> cuts.jsonl.gz; use --shar DIR")
            if tars and shard_size is not None:
                raise click.UsageError("--shard-size applies to raw lists; a shard list keeps "
                                       "one Shar shard per input tar")
            from wenet_lhotse.convert.shar import wenet_to_shar

            res = wenet_to_shar(data_list, shar_dir, data_type=data_type, shard_size=shard_size,
                                num_jobs=jobs, audio_format=audio_format, wav_root=wav_root,
                                progress=show_progress(), cluster=cluster, policy=policy)
            _print_skips(report)
            click.echo(f"Shar: {res.out_dir} ({res.num_shards} shards: {len(res.written_shards)} "
                       f"written, {len(res.skipped_shards)} already complete; "
                       f"{res.num_cuts_written} utterances written, {len(report)} skipped)")
            if res.shards_with_skips:
                click.echo(f"{len(res.shards_with_skips)} shards were written with items "
                           "skipped (recorded in them): fix the input and run this again to "
                           "rewrite them", err=True)
        else:
            from wenet_lhotse.convert.raw import import_raw

            if out is None:
                out = (data_list.rsplit("/", 1)[0] + "/cuts.jsonl.gz" if "://" in data_list
                       else os.path.join(os.path.dirname(os.path.abspath(data_list)),
                                         "cuts.jsonl.gz"))
            res = import_raw(data_list, out, wav_root=wav_root, policy=policy,
                             num_workers=jobs, progress=show_progress(), cluster=cluster)
            _print_skips(report)
            click.echo(f"cuts: {res.out_path} ({res.num_cuts} utterances, "
                       f"{res.seconds_of_audio / 3600:.3f} h, {len(report)} skipped)")
    except WenetDataError as err:
        raise _fail(err, "(use --skip-errors to skip bad items)") from None
    except ClusterError as err:
        raise click.ClickException(str(err)) from None


def _import_kind_to_cuts(kind, data_list, out, wav_root, policy) -> None:
    """A kind that is not a WeNet list and whose cuts point at audio files (e.g. another
    manifest) -> a cuts manifest, written atomically."""
    from lhotse import CutSet

    if out is None:
        out = os.path.join(os.path.dirname(os.path.abspath(data_list)), "cuts.jsonl.gz")
    cuts = kind.open([data_list], policy, wav_root=wav_root)
    n = 0
    suffix = ".jsonl.gz" if str(out).endswith(".gz") else ".jsonl"
    part = f"{out}.partial{suffix}"
    try:
        with CutSet.open_writer(part) as writer:
            for cut in cuts:
                writer.write(cut)
                n += 1
        os.replace(part, out)
    finally:
        if os.path.exists(part):
            os.unlink(part)
    _print_skips(policy.skip_report)
    click.echo(f"cuts: {out} ({n} utterances, {len(policy.skip_report)} skipped)")


def _say_audio_formats(lst, audio_dir) -> None:
    """One line on the audio files the export wrote, by format: audio held in memory
    (Shar, shards) is written losslessly, as FLAC where it is 16/24-bit PCM (not WAV)."""
    import json
    from collections import Counter
    from pathlib import Path

    from wenet_lhotse.convert.export import default_audio_dir

    adir = (Path(audio_dir) if audio_dir else default_audio_dir(lst)).absolute()
    with open(lst, encoding="utf-8") as f:
        paths = [Path(json.loads(line)["wav"]) for line in f if line.strip()]
    exts = Counter(p.suffix[1:].upper() for p in paths if p.parent == adir)
    if exts:
        what = ", ".join(f"{n} {ext}" for ext, n in sorted(exts.items()))
        flac = (" (FLAC: lossless, the same samples as the source in less space; WeNet "
                "reads it as it reads WAV)") if "FLAC" in exts else ""
        click.echo(f"audio files in {adir}: {what}{flac}")


@main.command("export")
@click.argument("source", metavar="CUTS_OR_SHAR", type=InputPath(exists=True))
@click.option("-o", "--out", type=click.Path(dir_okay=False), default=None,
              help="The list to write: a raw data.list, or with --shards the shard list "
                   "[default with --shards: DIR/../shards.list].")
@click.option("--shards", "shards_dir", type=click.Path(file_okay=False), default=None,
              help="Write WeNet tar shards (make_shard_list.py layout) into this directory "
                   "instead of a raw list.")
@click.option("--shard-size", type=int, default=1000, show_default=True,
              help="Utterances per tar with --shards.")
@jobs_option("Processes encoding tars (--shards) or writing audio files (raw list) "
             "in parallel.")
@click.option("--audio-dir", type=click.Path(file_okay=False), default=None,
              help="Raw list only: where audio held in memory (Shar, shards) is written "
                   "[default: <list name>_audio/ next to the list].")
@cluster_option
@policy_options()
def export_cmd(source, out, shards_dir, shard_size, jobs, audio_dir, cluster, policy):
    """Export Lhotse cuts back to WeNet format.

    CUTS_OR_SHAR is a cuts manifest (.jsonl.gz), a Shar directory, or a WeNet list.

    \b
    To a raw data.list (audio that is not already a file is written out losslessly):
      wenet-lhotse export data/train/shar -o data/train/data.list
    To WeNet tar shards plus their list:
      wenet-lhotse export data/cuts.jsonl.gz --shards data/shards -o data/shards.list
    """
    from wenet_lhotse.convert.executor import ClusterError
    from wenet_lhotse.errors import WenetDataError

    refuse_output_is_input(out, source)
    refuse_output_is_input(shards_dir, source, option="--shards")
    refuse_output_is_input(audio_dir, source, option="--audio-dir")
    try:
        if shards_dir is not None:
            from wenet_lhotse.convert.export import export_shards

            lst = export_shards(source, shards_dir, shard_size=shard_size, list_path=out,
                                num_workers=jobs, progress=show_progress(), cluster=cluster,
                                policy=policy)
            click.echo(f"shards: {shards_dir}, list: {lst}")
        else:
            if out is None:
                raise click.UsageError("pass -o data.list (or --shards DIR for tar shards)")
            from wenet_lhotse.convert.export import export_raw_list

            lst = export_raw_list(source, out, audio_dir=audio_dir, progress=show_progress(),
                                  policy=policy, num_workers=jobs,
                                  cluster=cluster)
            click.echo(f"raw list: {lst}")
            _say_audio_formats(lst, audio_dir)
    except (WenetDataError, ValueError, ClusterError) as err:
        raise _fail(err) from None


@main.command("validate")
@click.argument("path", type=InputPath(exists=True))
@click.option("--max-report", type=int, default=100, show_default=True,
              help="Print at most this many problems (all are counted).")
@jobs_option("Processes decoding audio in parallel (one tar or Shar shard per task; a "
             "list or manifest: one utterance per task).", default=1)
@cluster_option
@policy_options()
def validate_cmd(path, max_report, jobs, cluster, policy):
    """Read PATH completely, decoding every utterance's audio, and report each problem
    with its file and line (lists, manifests) or tar and member (shards, Shar).

    PATH is a WeNet raw list, a shard list, a cuts manifest, a Shar directory or any
    other input kind that is detected (docs/formats.md).
    Exits with status 1 if any problem was found, 0 otherwise.

    \b
    Example:
      wenet-lhotse validate data/train/data.list
    """
    from wenet_lhotse.convert.check import validate
    from wenet_lhotse.convert.executor import ClusterError

    try:
        res = validate(path, progress=show_progress(), num_jobs=jobs, cluster=cluster,
                       policy=policy)
    except ClusterError as err:
        raise click.ClickException(str(err)) from None
    items = list(res.problems)
    for item in items[:max_report]:
        click.echo(f"{item.location}: [{item.kind}] {item.message}")
    if len(items) > max_report:
        click.echo(f"... and {len(items) - max_report} more")
    click.echo(f"{path} ({res.kind}): {res.num_ok} utterances OK "
               f"({res.seconds_ok / 3600:.3f} h), {len(items)} problems")
    if items:
        by_kind = ", ".join(f"{k}: {v}" for k, v in sorted(res.problems.counts().items()))
        click.echo(f"problems by kind: {by_kind}")
        sys.exit(1)


@main.command("stats")
@click.argument("path", type=InputPath(exists=True))
@click.option("--plot", type=click.Path(dir_okay=False), default=None,
              help="Also write duration and text-length histograms to this PNG "
                   "(needs matplotlib).")
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON.")
@jobs_option("Processes reading tars (shard lists) or probing headers (raw lists).",
             default=1)
@cluster_option
@policy_options(strict=False)  # statistics of what is readable: bad items skipped
def stats_cmd(path, plot, as_json, jobs, cluster, policy):
    """Describe PATH: utterances, hours, speakers, and the distribution
    (min/mean/percentiles/max) of duration (seconds) and text length (characters).

    PATH is a WeNet raw list, a shard list, a cuts manifest, a Shar directory or any
    other input kind that is detected (docs/formats.md).
    Only metadata is read (no audio is decoded); bad items are skipped and counted.

    \b
    Example:
      wenet-lhotse stats data/train/data.list --plot train_stats.png
    """
    from wenet_lhotse.convert.executor import ClusterError
    from wenet_lhotse.convert.stats import corpus_stats, plot_stats

    try:
        st = corpus_stats(path, progress=not as_json and show_progress(), num_jobs=jobs,
                          cluster=cluster,
                          policy=policy)
    except ClusterError as err:
        raise click.ClickException(str(err)) from None
    click.echo(json.dumps(st.summary(), indent=2) if as_json else st.format())
    if plot:
        try:
            out = plot_stats(st, plot)
        except ImportError as err:
            raise click.ClickException(str(err)) from None
        if not as_json:
            click.echo(f"histograms: {out}")
