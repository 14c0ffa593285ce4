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
@click.option("--sigma", type=float, default=4.0, show_default=True,
              help="Tokens-per-second outliers (z-score above this, per duration bucket) "
                   "are left out of the token edges.")
@click.option("--strict", is_flag=True,
              help="Expect lhotse_conf.bucket_strict_2d: true (for the expected figures).")
def estimate_bins(input_path, units, bpe_model, num_buckets, num_token_buckets,
                  max_duration, max_tokens, num_cuts, sigma, strict):
    """Print 2D bins [[max seconds, max tokens], ...] and one batch size per bin, as
    JSON with the lhotse_conf keys that take them (bucket_bins_2d, bucket_batch_sizes_2d,
    max_tps: the per-bin tokens-per-second limit for the optional filter), and what the
    estimate's cuts would give: padding per dimension (audio, tokens: % of the padded
    totals, each cut padded to its bin's edges) and the number of batches."""
    from wenet_lhotse.formats.layout import cut_text
    from wenet_lhotse.loader.bins2d import bucket_batch_sizes, estimate_bins_2d, expected
    from wenet_lhotse.sources.open import open_cuts
    from wenet_lhotse.text.tokenizer import BpeTokenizer, CharTokenizer

    tok = BpeTokenizer(bpe_model, units) if bpe_model else CharTokenizer(units)
    cuts, _ = open_cuts(input_path, with_audio=False)
    durs, toks = [], []
    for cut in itertools.islice(cuts, num_cuts):
        durs.append(cut.duration)
        toks.append(len(tok.tokenize(cut_text(cut) or "")[1]))
    if not durs:
        raise click.ClickException(f"{input_path}: no cuts")
    est = estimate_bins_2d(durs, toks, num_buckets, num_token_buckets, sigma=sigma,
                           max_duration=max_duration)
    sizes = bucket_batch_sizes(est.bins, max_duration, max_tokens)
    exp = expected(est.bins, sizes, durs, toks, strict=strict)
    click.echo(json.dumps({
        "bucket_bins_2d": [[d, t] for d, t in est.bins], "bucket_batch_sizes_2d": sizes,
        "max_tps": est.max_tps, "num_cuts": len(durs), "tps_outliers": est.outliers,
        "expected": {"audio_padding_percent": round(100 * exp["audio_padding"], 1),
                     "token_padding_percent": round(100 * exp["token_padding"], 1),
                     "batches": exp["batches"]}}))
