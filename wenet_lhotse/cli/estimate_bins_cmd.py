"""``wenet-lhotse estimate-bins``: 2D bucket bins (duration x output tokens) and per-bucket
batch sizes from a corpus's metadata (no audio decoded)."""

from __future__ import annotations

import itertools
import json

import click

from wenet_lhotse.cli.main import main


class _Positive(click.ParamType):
    """A finite number > 0 (``inf``, ``nan``, 0 and negatives are click errors that
    name the option, not a traceback further on)."""

    name = "number"

    def convert(self, value, param, ctx):
        try:
            x = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number", param, ctx)
        if not (0 < x < float("inf")):
            self.fail(f"{value!r} must be a finite number > 0", param, ctx)
        return x


_COUNT = click.IntRange(min=1)


@main.command("estimate-bins")
@click.argument("input_path", type=click.Path(exists=True))
@click.option("--units", required=True, type=click.Path(exists=True, dir_okay=False),
              help="WeNet symbol table (units.txt / lang_char.txt).")
@click.option("--bpe-model", type=click.Path(exists=True, dir_okay=False), default=None,
              help="SentencePiece model (BPE units) for the tokens.")
@click.option("--num-buckets", type=_COUNT, default=10, show_default=True,
              help="Duration buckets.")
@click.option("--num-token-buckets", type=_COUNT, default=4, show_default=True,
              help="Token buckets within each duration bucket.")
@click.option("--max-duration", type=_Positive(), default=200.0, show_default=True,
              help="Seconds of padded audio per batch (sets the per-bucket batch sizes).")
@click.option("--max-tokens", type=_COUNT, default=None,
              help="Also cap the padded output tokens per batch.")
@click.option("--num-cuts", type=_COUNT, default=20000, show_default=True,
              help="Cuts read for the estimate (the first ones).")
def estimate_bins(input_path, units, bpe_model, num_buckets, num_token_buckets,
                  max_duration, max_tokens, num_cuts):
    """Print 2D bins [[max seconds, max tokens], ...] and one batch size per bin, as
    JSON with the lhotse_conf keys that take them (bucket_bins_2d, bucket_batch_sizes_2d)."""
    from wenet_lhotse.formats.layout import cut_text
    from wenet_lhotse.loader.bins2d import bucket_batch_sizes, estimate_bins_2d
    from wenet_lhotse.sources.open import open_cuts
    from wenet_lhotse.text.tokenizer import BpeTokenizer, CharTokenizer

    tok = BpeTokenizer(bpe_model, units) if bpe_model else CharTokenizer(units)
    cuts, _ = open_cuts(input_path, with_audio=False)
    durs, toks = [], []
    for cut in itertools.islice(cuts, num_cuts):
        durs.append(cut.duration)
        toks.append(len(tok.tokenize(cut_text(cut) or "")[1]))
    bins = estimate_bins_2d(durs, toks, num_buckets, num_token_buckets)
    sizes = bucket_batch_sizes(bins, max_duration, max_tokens)
    click.echo(json.dumps({"bucket_bins_2d": [[round(d, 3), t] for d, t in bins],
                           "bucket_batch_sizes_2d": sizes, "num_cuts": len(durs)}))
