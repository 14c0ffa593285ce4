"""``wenet-lhotse make-list``: Kaldi data dir -> WeNet raw data.list."""

from __future__ import annotations

from pathlib import Path

import click

from wenet_lhotse.cli.main import main, refuse_output_is_input


@main.command("make-list")
@click.argument("data_dir", type=click.Path(exists=True, file_okay=False))
@click.option("-o", "--out", type=click.Path(dir_okay=False), default=None,
              help="Output list [default: DATA_DIR/data.list].")
def make_list(data_dir, out):
    """Write DATA_DIR/data.list from DATA_DIR's wav.scp, text and (if present)
    segments, exactly like WeNet's tools/make_raw_list.py."""
    from wenet_lhotse.formats.kaldi import kaldi_dir_to_raw_list

    d = Path(data_dir)
    segments = d / "segments"
    refuse_output_is_input(out or d / "data.list", d / "wav.scp", d / "text", segments)
    path, n = kaldi_dir_to_raw_list(d / "wav.scp", d / "text", out or d / "data.list",
                                    segments=segments if segments.exists() else None)
    click.echo(f"wrote {n} lines to {path}")


@main.command("make-units")
@click.argument("text", type=click.Path(exists=True, dir_okay=False))
@click.option("-o", "--out", type=click.Path(dir_okay=False), required=True,
              help="Output symbol table, e.g. data/dict/lang_char.txt.")
@click.option("--non-lang-syms", type=click.Path(exists=True, dir_okay=False), default=None,
              help="File of non-linguistic symbols ([NOISE], <unk>-like spans) kept whole.")
@click.option("--bpe", "bpe_vocab_size", type=int, default=None,
              help="Train a SentencePiece model of this vocabulary size instead of chars.")
@click.option("--bpe-model-prefix", type=click.Path(dir_okay=False), default=None,
              help="Where the BPE model goes: PREFIX.model [default: next to --out].")
@click.option("--sos-eos-last", is_flag=True,
              help="The old layout: <sos/eos> as the last id (for yamls without "
                   "tokenizer_conf.special_tokens) instead of id 2.")
def make_units(text, out, non_lang_syms, bpe_vocab_size, bpe_model_prefix, sos_eos_last):
    """Write a WeNet symbol table from a Kaldi TEXT file: chars, as WeNet's aishell
    recipe builds lang_char.txt, or with --bpe a SentencePiece unigram model and its
    pieces, as WeNet's librispeech recipe does.

    \b
    Layout, as WeNet's current recipes and their yamls' special_tokens
    ({<blank>: 0, <unk>: 1, <sos>: 2, <eos>: 2}):
      <blank> 0, <unk> 1, <sos/eos> 2, then the units from 3.
    With --sos-eos-last: <blank> 0, <unk> 1, units from 2, <sos/eos> last."""
    from wenet_lhotse.text.units import train_bpe_units, write_char_units

    refuse_output_is_input(out, text, non_lang_syms)
    if bpe_vocab_size:
        prefix = bpe_model_prefix or str(Path(out).with_suffix("")) + f"_unigram{bpe_vocab_size}"
        path, n = train_bpe_units(text, prefix, out, vocab_size=bpe_vocab_size,
                                  sos_eos_last=sos_eos_last)
        click.echo(f"wrote {prefix}.model and {n} symbols to {path}")
    else:
        path, n = write_char_units(text, out, non_lang_syms=non_lang_syms,
                                   sos_eos_last=sos_eos_last)
        click.echo(f"wrote {n} symbols to {path}")
