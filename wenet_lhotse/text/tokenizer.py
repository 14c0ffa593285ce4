"""Tokenizers that reproduce WeNet's text rules exactly (``wenet/text/*_tokenizer.py``).

Rules relied on (read from WeNet's ``char_tokenizer.py``, ``bpe_tokenizer.py``,
``tokenize_utils.py`` and ``utils/file_utils.py``):

* Symbol table (``units.txt`` / ``lang_char.txt``): one ``token id`` pair per line.
  A later duplicate token overrides an earlier one; :meth:`vocab_size` is the
  number of distinct ids (WeNet's ``len(char_dict)``).
* Non-linguistic symbols: when ``non_lang_syms`` is given (a path or a list, even an
  empty one) the line is **upper-cased** and split on
  ``(\\[[^\\[\\]]+\\]|<[^<>]+>|{[^{}]+})``; blank parts are dropped. A part listed in
  ``non_lang_syms`` is one token; any other part (including a bracketed span that is
  not listed) is tokenized character by character. The char tokenizer strips each
  part (so spaces next to a symbol disappear); the BPE tokenizer does not.
  Without ``non_lang_syms`` the line is only stripped, never upper-cased.
* Char: each character is a token and a space becomes ``▁``. With
  ``split_with_space=True`` a part is split on single spaces instead, each word being
  one token (two spaces in a row give an empty token, which maps to ``<unk>``, as in
  WeNet).
* BPE: characters in U+4E00..U+9FFF are tokens one by one; every other run is
  upper-cased (``upper=True``, WeNet's only behaviour) and encoded with the
  SentencePiece model (``encode_as_pieces``).
* Token -> id: the table's id; else the ``<unk>`` id when the table has ``<unk>``;
  else the token is dropped (we log a warning once per tokenizer).
* ``tokens2text``: char joins with ``connect_symbol``; BPE also turns ``▁`` back into
  spaces and strips.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from lhotse.utils import Pathlike

from wenet_lhotse.errors import WenetDataError
from wenet_lhotse.io.lines import bounded_lines

logger = logging.getLogger(__name__)


#: WeNet's pattern for non-linguistic symbols: ``[...]``, ``<...>`` or ``{...}`` spans.
NON_LANG_SYMS_PATTERN = re.compile(r"(\[[^\[\]]+\]|<[^<>]+>|{[^{}]+})")
#: CJK Unified Ideographs, split one by one before BPE (WeNet's ``tokenize_by_bpe_model``).
CJK_PATTERN = re.compile(r"([\u4e00-\u9fff])")
#: The token a space becomes.
SPACE_SYMBOL = "▁"


def read_symbol_table(path: Pathlike) -> Dict[str, int]:
    """Read a WeNet symbol table (``token id`` per line, UTF-8).

    Blank lines are skipped; a line without exactly two fields raises
    :class:`WenetDataError` naming the file and line (WeNet asserts).
    """
    table: Dict[str, int] = {}
    with open(path, encoding="utf-8") as fin:
        for lineno, line in bounded_lines(fin, str(path)):
            arr = line.strip().split()
            if not arr:
                continue
            if len(arr) != 2:
                raise WenetDataError(
                    f"expected 'token id', got {line.strip()!r}", str(path), line=lineno,
                    kind="symbol_table")
            try:
                table[arr[0]] = int(arr[1])
            except ValueError:
                raise WenetDataError(f"id {arr[1]!r} is not an integer", str(path),
                                     line=lineno, kind="symbol_table") from None
    if not table:
        raise WenetDataError("symbol table is empty", str(path), kind="symbol_table")
    return table


def read_non_lang_symbols(path: Optional[Pathlike]) -> List[str]:
    """Read a non-linguistic symbols file (one symbol per line, e.g. ``{NOISE}``).

    ``None`` gives ``[]``. Each symbol must be a ``{...}``, ``<...>`` or ``[...]`` span,
    as WeNet requires; otherwise :class:`WenetDataError` names the file and line.
    """
    if path is None:
        return []
    syms: List[str] = []
    with open(path, encoding="utf-8") as fin:
        for lineno, line in bounded_lines(fin, str(path)):
            sym = line.strip()
            if not sym:
                continue
            if NON_LANG_SYMS_PATTERN.fullmatch(sym) is None:
                raise WenetDataError(
                    f"non-linguistic symbol {sym!r} must be formatted as {{xxx}}, <xxx> or [xxx]",
                    str(path), line=lineno, kind="non_lang_syms")
            syms.append(sym)
    return syms


class BaseTokenizer:
    """WeNet's tokenizer interface: ``tokenize(line) -> (tokens, ids)`` and back."""

    def tokenize(self, line: str) -> Tuple[List[str], List[int]]:
        tokens = self.text2tokens(line)
        ids = self.tokens2ids(tokens)
        return tokens, ids

    def detokenize(self, ids: Sequence[int]) -> Tuple[str, List[str]]:
        tokens = self.ids2tokens(ids)
        text = self.tokens2text(tokens)
        return text, tokens

    def text2tokens(self, line: str) -> List[str]:  # pragma: no cover - abstract
        raise NotImplementedError

    def tokens2text(self, tokens: Sequence[str]) -> str:  # pragma: no cover - abstract
        raise NotImplementedError

    def tokens2ids(self, tokens: Sequence[str]) -> List[int]:  # pragma: no cover - abstract
        raise NotImplementedError

    def ids2tokens(self, ids: Sequence[int]) -> List[str]:  # pragma: no cover - abstract
        raise NotImplementedError

    def vocab_size(self) -> int:  # pragma: no cover - abstract
        raise NotImplementedError


class CharTokenizer(BaseTokenizer):
    """WeNet's ``CharTokenizer``: one token per character (``▁`` for a space).

    :param symbol_table: path to ``units.txt`` or a ``{token: id}`` dict.
    :param non_lang_syms: path to a non-linguistic symbols file or a list of symbols;
        when not ``None`` the text is upper-cased before splitting (WeNet's rule).
    :param split_with_space: tokens are space-separated words instead of characters.
    :param connect_symbol: joins tokens in :meth:`tokens2text`.
    :param unk: the unknown token; unknown tokens map to its id when the table has it.

    >>> tok = CharTokenizer({"<blank>": 0, "<unk>": 1, "你": 2, "好": 3, "<sos/eos>": 4})
    >>> tok.tokenize("你好"), tok.vocab_size()
    ((['你', '好'], [2, 3]), 5)
    """

    def __init__(
        self,
        symbol_table: Union[Pathlike, Mapping[str, int]],
        non_lang_syms: Optional[Union[Pathlike, Sequence[str]]] = None,
        split_with_space: bool = False,
        connect_symbol: str = "",
        unk: str = "<unk>",
    ) -> None:
        # WeNet compiles the pattern (and so upper-cases text) whenever
        # non_lang_syms is not None, even for an empty list.
        self.non_lang_syms_pattern = NON_LANG_SYMS_PATTERN if non_lang_syms is not None else None
        #: the table's file when read from one (start-up checks name its lines)
        self.symbol_table_path: Optional[str] = None
        if isinstance(symbol_table, Mapping):
            self._symbol_table = dict(symbol_table)
        else:
            self._symbol_table = read_symbol_table(symbol_table)
            self.symbol_table_path = str(symbol_table)
        if non_lang_syms is None or isinstance(non_lang_syms, (str, os.PathLike)):
            self.non_lang_syms = read_non_lang_symbols(non_lang_syms)
        else:
            self.non_lang_syms = list(non_lang_syms)
        self.char_dict = {v: k for k, v in self._symbol_table.items()}
        self.split_with_space = split_with_space
        self.connect_symbol = connect_symbol
        self.unk = unk
        self._warned_drop = False

    def _split_parts(self, line: str, strip_parts: bool) -> List[str]:
        line = line.strip()
        if self.non_lang_syms_pattern is None:
            return [line]
        parts = self.non_lang_syms_pattern.split(line.upper())
        if strip_parts:
            return [w.strip() for w in parts if len(w.strip()) > 0]
        return [w for w in parts if len(w.strip()) > 0]

    def text2tokens(self, line: str) -> List[str]:
        tokens: List[str] = []
        for part in self._split_parts(line, strip_parts=True):
            if part in self.non_lang_syms:
                tokens.append(part)
                continue
            if self.split_with_space:
                tokens.extend(part.split(" "))  # (no piece is " " after the split)
            else:  # one token per character, a space as SPACE_SYMBOL (one character)
                tokens.extend(part.replace(" ", SPACE_SYMBOL))
        return tokens

    def tokens2text(self, tokens: Sequence[str]) -> str:
        return self.connect_symbol.join(tokens)

    def tokens2ids(self, tokens: Sequence[str]) -> List[int]:
        table = self._symbol_table
        unk_id = table.get(self.unk)
        ids: List[int] = [table.get(tok, unk_id) for tok in tokens]  # type: ignore[misc]
        if unk_id is not None or None not in ids:
            return ids
        ids = []  # a token neither in the table nor mappable to <unk>: dropped
        for tok in tokens:
            idx = table.get(tok)
            if idx is not None:
                ids.append(idx)
            elif unk_id is not None:
                ids.append(unk_id)
            elif not self._warned_drop:
                # WeNet drops the token silently; say so once.
                self._warned_drop = True
                logger.warning("token %r is not in the symbol table, which has no %r: "
                               "unknown tokens are dropped (logged once)", tok, self.unk)
        return ids

    def ids2tokens(self, ids: Sequence[int]) -> List[str]:
        try:
            return [self.char_dict[int(i)] for i in ids]
        except KeyError as err:
            raise KeyError(f"id {err.args[0]} is not in the symbol table") from None

    def vocab_size(self) -> int:
        return len(self.char_dict)

    @property
    def symbol_table(self) -> Dict[str, int]:
        return self._symbol_table


def _load_sentencepiece(model: Union[Pathlike, bytes]) -> Any:
    try:
        import sentencepiece as spm
    except ImportError as err:
        raise ImportError(
            "BpeTokenizer needs the 'sentencepiece' package: "
            "pip install sentencepiece (or, in the wenet-lhotse clone: "
            "pip install -e '.[bpe]')") from err
    sp = spm.SentencePieceProcessor()
    if isinstance(model, bytes):
        sp.load_from_serialized_proto(model)
    else:
        if not Path(model).is_file():
            raise FileNotFoundError(f"BPE model not found: {model}")
        sp.load(str(model))
    return sp


def tokenize_by_bpe_model(sp: Any, txt: str, upper: bool = True) -> List[str]:
    """WeNet's ``tokenize_by_bpe_model``: CJK characters one by one, the rest through ``sp``."""
    tokens: List[str] = []
    chars = CJK_PATTERN.split(txt.upper() if upper else txt)
    for ch_or_w in (w for w in chars if len(w.strip()) > 0):
        if CJK_PATTERN.fullmatch(ch_or_w) is not None:
            tokens.append(ch_or_w)
        else:
            tokens.extend(sp.encode_as_pieces(ch_or_w))
    return tokens


class BpeTokenizer(CharTokenizer):
    """WeNet's ``BpeTokenizer``: CJK characters split one by one, other text through a
    SentencePiece model after upper-casing.

    ``sentencepiece`` is imported here, not at module import; a clear ImportError says
    how to install it. Picklable (the model travels as its serialized proto), so it
    can go to DataLoader workers under any start method.

    :param bpe_model: path to the SentencePiece ``.model`` file.
    :param upper: upper-case non-CJK text before encoding (WeNet always does).
    Other parameters as in :class:`CharTokenizer`.
    """

    def __init__(
        self,
        bpe_model: Pathlike,
        symbol_table: Union[Pathlike, Mapping[str, int]],
        non_lang_syms: Optional[Union[Pathlike, Sequence[str]]] = None,
        split_with_space: bool = False,
        connect_symbol: str = "",
        unk: str = "<unk>",
        upper: bool = True,
    ) -> None:
        super().__init__(symbol_table, non_lang_syms, split_with_space, connect_symbol, unk)
        self.upper = upper
        self.bpe_model_path = str(bpe_model)
        self.bpe_model = _load_sentencepiece(bpe_model)

    def text2tokens(self, line: str) -> List[str]:
        tokens: List[str] = []
        for part in self._split_parts(line, strip_parts=False):
            if part in self.non_lang_syms:
                tokens.append(part)
            else:
                tokens.extend(tokenize_by_bpe_model(self.bpe_model, part, upper=self.upper))
        return tokens

    def tokens2text(self, tokens: Sequence[str]) -> str:
        return super().tokens2text(tokens).replace(SPACE_SYMBOL, " ").strip()

    def __getstate__(self) -> Dict[str, Any]:
        state = self.__dict__.copy()
        state["bpe_model"] = self.bpe_model.serialized_model_proto()
        return state

    def __setstate__(self, state: Dict[str, Any]) -> None:
        state = dict(state)
        state["bpe_model"] = _load_sentencepiece(state["bpe_model"])
        self.__dict__.update(state)


def tokenizer_from_wenet_conf(configs: Mapping[str, Any]) -> BaseTokenizer:
    """Build the tokenizer a WeNet yaml describes (WeNet's ``init_tokenizer``).

    Reads ``configs["tokenizer"]`` (``"char"`` by default, or ``"bpe"``) and
    ``configs["tokenizer_conf"]``: ``symbol_table_path``, ``non_lang_syms_path``
    (optional), ``split_with_space`` (default False), ``connect_symbol`` (char only,
    default ""), ``bpe_path`` (bpe). Other WeNet tokenizer types (whisper, paraformer,
    sentencepiece) are delegated to WeNet's own ``init_tokenizer`` when WeNet is
    installed; our dataset accepts any object with WeNet's ``tokenize(line)``.
    """
    kind = configs.get("tokenizer", "char")
    conf = configs.get("tokenizer_conf")
    if conf is None:
        raise ValueError("config has no 'tokenizer_conf' section (WeNet's tokenizer settings)")
    if kind in ("char", "bpe") and "symbol_table_path" not in conf:
        raise ValueError("tokenizer_conf needs 'symbol_table_path'")
    if kind == "char":
        tokenizer: BaseTokenizer = CharTokenizer(
            conf["symbol_table_path"], conf.get("non_lang_syms_path"),
            split_with_space=conf.get("split_with_space", False),
            connect_symbol=conf.get("connect_symbol", ""))
    elif kind == "bpe":
        if "bpe_path" not in conf:
            raise ValueError("tokenizer 'bpe' needs tokenizer_conf.bpe_path")
        tokenizer = BpeTokenizer(
            conf["bpe_path"], conf["symbol_table_path"], conf.get("non_lang_syms_path"),
            split_with_space=conf.get("split_with_space", False))
    else:
        try:
            from wenet.utils.init_tokenizer import init_tokenizer
        except ImportError:
            raise NotImplementedError(
                f"tokenizer {kind!r} is provided by WeNet itself; install wenet, or build "
                "the tokenizer with WeNet and pass it to the dataset") from None
        return init_tokenizer(dict(configs))
    logger.info("use %s tokenizer (vocab size %d)", kind, tokenizer.vocab_size())
    return tokenizer
