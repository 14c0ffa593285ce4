"""``wenet-lhotse parquet-import`` / ``parquet-export``: Parquet and Hugging Face
``datasets`` (``save_to_disk``) <-> WeNet shards; any input -> Parquet (extra ``arrow``)."""

from __future__ import annotations

import click

from wenet_lhotse.cli.main import main, policy_options, refuse_output_is_input


def _columns(audio: str, text: str, key: str):
    from wenet_lhotse.sources.parquet import ParquetColumns

    return ParquetColumns(audio=audio, text=text or None, id=key or None)


@main.command("parquet-import")
@click.argument("inputs", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("-o", "--out-dir", required=True, type=click.Path(file_okay=False),
              help="Directory for the WeNet shards and shards.list.")
@click.option("--shard-size", type=int, default=1000, show_default=True)
@click.option("--audio-column", default="audio", show_default=True,
              help="Audio bytes, or a datasets Audio(decode=False) {bytes, path} struct.")
@click.option("--text-column", default="text", show_default=True,
              help="Transcript column ('' for none: speech-only data).")
@click.option("--id-column", default="id", show_default=True,
              help="Utterance id column (missing: <file stem>-<row>).")
@policy_options(skip_errors=("--fault-tolerant", "Skip bad rows (named and counted) instead "
                                                  "of stopping at the first."),
                pipe=False)  # Parquet rows run no command
def parquet_import(inputs, out_dir, shard_size, audio_column, text_column, id_column, policy):
    """Parquet files, directories of them, or a datasets save_to_disk directory ->
    WeNet tar shards: audio bytes as stored, named by their own format (wav, flac, ogg,
    opus, mp3, ...); texts byte for byte; every other column a member of its own."""
    from wenet_lhotse.convert.parquet import import_parquet

    report = policy.skip_report
    refuse_output_is_input(out_dir, *inputs)
    path, n = import_parquet(list(inputs), out_dir, shard_size=shard_size,
                             columns=_columns(audio_column, text_column, id_column),
                             policy=policy)
    click.echo(f"wrote {n} utterances to {path}" +
               (f"; skipped {len(report.items)} bad rows" if report.items else ""))


@main.command("parquet-export")
@click.argument("input_path", type=click.Path(exists=True))
@click.argument("out", type=click.Path(dir_okay=False))
def parquet_export(input_path, out):
    """Any input (raw list, shard list, cuts manifest, Shar directory, Parquet) -> one
    Parquet file: id, audio {bytes, path}, text, duration."""
    from wenet_lhotse.convert.parquet import export_parquet
    from wenet_lhotse.formats.shard_list import read_shard_entries
    from wenet_lhotse.io.outputs import OutputGuard
    from wenet_lhotse.sources.open import open_cuts
    from wenet_lhotse.sources.registry import get_kind

    refuse_output_is_input(out, input_path)
    cuts, kind = open_cuts(input_path)  # any detected kind, Parquet included
    if get_kind(kind).lists_tars:  # a list of tars: nor one of the tars it lists
        refuse_output_is_input(out, *[e.url for e in read_shard_entries(input_path)])
    n = export_parquet(OutputGuard(out).cuts(cuts), out)  # nor one of the audio files
    click.echo(f"wrote {n} rows to {out}")
