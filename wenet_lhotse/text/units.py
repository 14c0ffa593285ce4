"""Symbol tables as WeNet recipes build them: chars (aishell) and BPE (librispeech).

Layout (one ``unit id`` per line, UTF-8, written atomically):

* default -- WeNet's current recipes (``examples/*/s0/run.sh`` stage 2): ``<blank> 0``,
  ``<unk> 1``, ``<sos/eos> 2``, then the units in code-point order from 3. It matches the
  recipe yamls' ``tokenizer_conf.special_tokens: {<blank>: 0, <unk>: 1, <sos>: 2, <eos>: 2}``.
* ``sos_eos_last=True`` -- the old layout: ``<blank> 0``, ``<unk> 1``, units from 2,
  ``<sos/eos>`` last. For yamls without ``special_tokens`` (WeNet then takes
  ``vocab_size - 1`` as sos/eos).

Where it differs from the recipe: a space in a transcript is the unit ``▁``, the token
WeNet's ``CharTokenizer`` produces for it (``text2token.py`` would emit ``<space>``,
which that tokenizer never looks up); aishell's recipe removes spaces first, so the
tables are equal there. Units sort by code point (the recipes' ``LC_ALL=C sort``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Iterator, List, Optional, Tuple

from lhotse.utils import Pathlike

from wenet_lhotse.errors import WenetDataError
from wenet_lhotse.io.streams import atomic_output

#: The special symbols, in WeNet's current order (ids 0, 1, 2).
SPECIAL_UNITS = ("<blank>", "<unk>", "<sos/eos>")


def _transcripts(text: Pathlike) -> Iterator[str]:
    """Transcripts of a Kaldi ``text`` file (``<utt-id> <transcript>``)."""
    with open(text, "rb") as f:
        for no, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise WenetDataError(f"not valid UTF-8 (byte {err.start})", str(text), line=no,
                                     kind="encoding") from None
            arr = line.strip().split(maxsplit=1)
            if len(arr) == 2:
                yield arr[1]


def units_table(units: Iterable[str], sos_eos_last: bool = False) -> List[str]:
    """The symbol table's units in id order (see the module docstring for the layout)."""
    body = sorted(set(units) - set(SPECIAL_UNITS))
    if sos_eos_last:
        return ["<blank>", "<unk>", *body, "<sos/eos>"]
    return [*SPECIAL_UNITS, *body]


def _write_table(units: Iterable[str], output: Pathlike, sos_eos_last: bool
                 ) -> Tuple[Path, int]:
    table = units_table(units, sos_eos_last)
    with atomic_output(output, "w", encoding="utf-8") as out:
        out.write("".join(f"{u} {i}\n" for i, u in enumerate(table)))
    return Path(output), len(table)


def write_char_units(text: Pathlike, output: Pathlike, non_lang_syms: Optional[Pathlike] = None,
                     sos_eos_last: bool = False) -> Tuple[Path, int]:
    """Char table from a Kaldi ``text`` file, as WeNet's aishell recipe builds
    ``lang_char.txt`` (``tools/text2token.py -s 1 -n 1 | sort | uniq``); a space is ``▁``.
    Returns ``(output, vocab_size)``."""
    from wenet_lhotse.text.tokenizer import CharTokenizer

    # WeNet's own char rules, so non-linguistic symbols stay whole.
    tok = CharTokenizer({"<blank>": 0, "<unk>": 1},
                        non_lang_syms=str(non_lang_syms) if non_lang_syms else None)
    units = {t for line in _transcripts(text) for t in tok.text2tokens(line) if t.strip()}
    return _write_table(units, output, sos_eos_last)


def train_bpe_units(text: Pathlike, model_prefix: Pathlike, output: Pathlike,
                    vocab_size: int = 5000, model_type: str = "unigram",
                    sos_eos_last: bool = False) -> Tuple[Path, int]:
    """Train a SentencePiece model on the upper-cased transcripts and write its units
    table, as WeNet's librispeech recipe does (``spm_train`` then ``spm_encode
    --output_format=piece | sort | uniq``). Writes ``<model_prefix>.model``.
    Needs the ``bpe`` extra (sentencepiece). Returns ``(output, table size)``."""
    try:
        import sentencepiece as spm
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("BPE units need sentencepiece: pip install sentencepiece (or, "
                          "in the wenet-lhotse clone: pip install -e '.[bpe]')") from e
    lines = [t.upper() for t in _transcripts(text)]
    Path(model_prefix).parent.mkdir(parents=True, exist_ok=True)
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_prefix=str(model_prefix), vocab_size=vocab_size,
        model_type=model_type, character_coverage=1.0, input_sentence_size=100000000,
        hard_vocab_limit=False)
    sp = spm.SentencePieceProcessor(model_file=f"{model_prefix}.model")
    units = {p for line in lines for p in sp.encode(line, out_type=str)}
    return _write_table(units, output, sos_eos_last)
