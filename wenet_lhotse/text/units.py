"""Symbol tables as WeNet recipes build them: chars (aishell) and BPE (librispeech).

Both write WeNet's layout: ``<blank> 0``, ``<unk> 1``, the sorted units from 2 on,
``<sos/eos>`` last, one ``unit id`` per line, atomically.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator, List, Optional, Tuple

from lhotse.utils import Pathlike

from wenet_lhotse.formats.streams import atomic_output


def _transcripts(text: Pathlike) -> Iterator[str]:
    """Transcripts of a Kaldi ``text`` file (``<utt-id> <transcript>``)."""
    with open(text, encoding="utf-8") as f:
        for line in f:
            arr = line.strip().split(maxsplit=1)
            if len(arr) == 2:
                yield arr[1]


def _write_table(units: List[str], output: Pathlike) -> Tuple[Path, int]:
    table = ["<blank>", "<unk>"] + sorted(set(units) - {"<blank>", "<unk>", "<sos/eos>"})
    table.append("<sos/eos>")
    with atomic_output(output, "w", encoding="utf-8") as out:
        out.write("".join(f"{u} {i}\n" for i, u in enumerate(table)))
    return Path(output), len(table)


def write_char_units(text: Pathlike, output: Pathlike, non_lang_syms: Optional[Pathlike] = None
                     ) -> Tuple[Path, int]:
    """Char table from a Kaldi ``text`` file, as WeNet's aishell recipe builds
    ``lang_char.txt`` (``tools/text2token.py -s 1 -n 1 | sort | uniq``); a space is ``▁``.
    Returns ``(output, vocab_size)``."""
    from wenet_lhotse.text.tokenizer import CharTokenizer

    # WeNet's own char rules, so non-linguistic symbols stay whole.
    tok = CharTokenizer({"<blank>": 0, "<unk>": 1},
                        non_lang_syms=str(non_lang_syms) if non_lang_syms else None)
    units = {t for line in _transcripts(text) for t in tok.text2tokens(line) if t.strip()}
    return _write_table(sorted(units), output)


def train_bpe_units(text: Pathlike, model_prefix: Pathlike, output: Pathlike,
                    vocab_size: int = 5000, model_type: str = "unigram") -> Tuple[Path, int]:
    """Train a SentencePiece model on the upper-cased transcripts and write its units
    table, as WeNet's librispeech recipe does (``spm_train`` then ``spm_encode
    --output_format=piece | sort | uniq``). Writes ``<model_prefix>.model``.
    Needs the ``bpe`` extra (sentencepiece). Returns ``(output, table size)``."""
    try:
        import sentencepiece as spm
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("BPE units need sentencepiece: pip install 'wenet-lhotse[bpe]'") from e
    lines = [t.upper() for t in _transcripts(text)]
    Path(model_prefix).parent.mkdir(parents=True, exist_ok=True)
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_prefix=str(model_prefix), vocab_size=vocab_size,
        model_type=model_type, character_coverage=1.0, input_sentence_size=100000000,
        hard_vocab_limit=False)
    sp = spm.SentencePieceProcessor(model_file=f"{model_prefix}.model")
    units = {p for line in lines for p in sp.encode(line, out_type=str)}
    return _write_table(sorted(units), output)
