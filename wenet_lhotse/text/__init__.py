"""WeNet-compatible tokenizers (char and BPE) and symbol-table readers."""

from wenet_lhotse.text.tokenizer import (
    CJK_PATTERN,
    NON_LANG_SYMS_PATTERN,
    SPACE_SYMBOL,
    BaseTokenizer,
    BpeTokenizer,
    CharTokenizer,
    read_non_lang_symbols,
    read_symbol_table,
    tokenize_by_bpe_model,
    tokenizer_from_wenet_conf,
)

__all__ = [
    "BaseTokenizer",
    "BpeTokenizer",
    "CJK_PATTERN",
    "CharTokenizer",
    "NON_LANG_SYMS_PATTERN",
    "SPACE_SYMBOL",
    "read_non_lang_symbols",
    "read_symbol_table",
    "tokenize_by_bpe_model",
    "tokenizer_from_wenet_conf",
]
