"""Start-up checks of a WeNet yaml: ``dataset_conf`` (with our ``lhotse_conf``) and the
symbol table against ``tokenizer_conf.special_tokens``.

Every problem is one :class:`WenetConfigError` whose message names the yaml key::

    dataset_conf.batch_conf.batch_sise: unknown key; did you mean batch_size?
    dataset_conf.lhotse_conf.fault_tolerant: expected a boolean, got 'false'
    tokenizer_conf.special_tokens.<sos>: 2, but units.txt line 3 maps id 2 to 'a'

The keys are those WeNet's ``wenet/dataset/dataset.py`` reads and the parameters of the
``wenet/dataset/processor.py`` functions each section is passed to (a test reads both
from WeNet's source), plus ``syncbn`` and :data:`IGNORED` (``split_with_space``), which
some of WeNet's own example yamls carry and WeNet ignores (the latter noted once in the
log). ``lhotse_conf`` keys come from :class:`~.lhotse_conf.LhotseConf`. Every
key's check is declared once, in :mod:`~wenet_lhotse.loader.schema`.

Where it differs from WeNet: WeNet ignores unknown keys and fails late (or never) on
bad values; a typo there silently falls back to a default. We stop at start-up. We are
more lenient than WeNet where WeNet would crash on something harmless to us (e.g. a
missing ``shuffle_conf`` while ``shuffle`` is on).
"""

from __future__ import annotations

import difflib
import logging
import os
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Sequence, Union

from wenet_lhotse.errors import WenetConfigError, WenetDataError
from wenet_lhotse.formats.yaml_load import bounded_safe_load
from wenet_lhotse.loader.lhotse_conf import LhotseConf
from wenet_lhotse.loader.schema import (
    SCALARS,
    SECTIONS,
    Check,
    field_rules,
    integer,
)
from wenet_lhotse.loader.schema import show as _show

Pathlike = Union[str, os.PathLike]

logger = logging.getLogger(__name__)

#: dataset_conf keys in WeNet's example yamls that WeNet's data pipeline never reads:
#: accepted with any value, as WeNet does, and noted once per process in the log.
IGNORED: Dict[str, str] = {
    # chime4, commonvoice/fr, timit (2): WeNet reads tokenizer_conf.split_with_space
    "split_with_space": "WeNet reads tokenizer_conf.split_with_space, not this",
}
_NOTED: set = set()


def _note_ignored(key: str, where: str, source: Optional[str]) -> None:
    if key not in _NOTED:
        _NOTED.add(key)
        logger.info("%s%s.%s: ignored, as WeNet ignores it (%s)",
                    f"{source}: " if source else "", where, key, IGNORED[key])


def lhotse_conf_rules() -> Dict[str, Check]:
    """Each ``lhotse_conf`` key's check, declared on :class:`~.lhotse_conf.LhotseConf`'s fields."""
    return field_rules(LhotseConf)


def _unknown(key: str, known: Sequence[str], where: str, source: Optional[str]
             ) -> WenetConfigError:
    near = difflib.get_close_matches(str(key), list(known), n=1, cutoff=0.6)
    hint = f"did you mean {near[0]}?" if near else f"known keys: {', '.join(sorted(known))}"
    return WenetConfigError(f"{where}.{key}", f"unknown key; {hint}", source)


def _check_section(conf: Any, rules: Mapping[str, Check], where: str,
                   source: Optional[str]) -> None:
    if conf is None:
        return
    if not isinstance(conf, Mapping):
        raise WenetConfigError(where, f"expected a mapping (key: value), got {_show(conf)}",
                               source)
    for key, value in conf.items():
        if key not in rules:
            raise _unknown(key, list(rules), where, source)
        problem = rules[key](value)
        if problem:
            raise WenetConfigError(f"{where}.{key}", f"{problem}, got {_show(value)}", source)


def check_dataset_conf(dataset_conf: Optional[Mapping[str, Any]], *,
                       source: Optional[Pathlike] = None,
                       where: str = "dataset_conf") -> None:
    """Raise :class:`WenetConfigError` for the first unknown key or bad value in WeNet's
    ``dataset_conf`` (``lhotse_conf`` included). ``source``: the yaml, for the message."""
    src = str(source) if source else None
    if dataset_conf is None:
        return
    if not isinstance(dataset_conf, Mapping):
        raise WenetConfigError(where, f"expected a mapping (key: value), got "
                                      f"{_show(dataset_conf)}", src)
    known = [*SECTIONS, *SCALARS, "lhotse_conf"]
    for key, value in dataset_conf.items():
        if key in SECTIONS:
            _check_section(value, SECTIONS[key], f"{where}.{key}", src)
        elif key in SCALARS:
            problem = SCALARS[key](value)
            if problem:
                raise WenetConfigError(f"{where}.{key}", f"{problem}, got {_show(value)}", src)
        elif key == "lhotse_conf":
            _check_section(value, lhotse_conf_rules(), f"{where}.lhotse_conf", src)
        elif key in IGNORED:
            _note_ignored(key, where, src)
        else:
            raise _unknown(key, known, where, src)
    batch = dataset_conf.get("batch_conf") or {}
    if batch.get("batch_type") == "bucket":
        bounds, sizes = batch.get("bucket_boundaries"), batch.get("bucket_batch_sizes")
        if bounds is None or sizes is None:
            missing = "bucket_boundaries" if bounds is None else "bucket_batch_sizes"
            raise WenetConfigError(f"{where}.batch_conf.{missing}",
                                   "required with batch_type: bucket", src)
        if len(sizes) != len(bounds) + 1:
            raise WenetConfigError(
                f"{where}.batch_conf.bucket_batch_sizes",
                f"needs len(bucket_boundaries) + 1 = {len(bounds) + 1} sizes, got {len(sizes)}",
                src)
    if dataset_conf.get("speaker_conf") is not None and "speaker_table_path" not in \
            dataset_conf["speaker_conf"]:
        raise WenetConfigError(f"{where}.speaker_conf.speaker_table_path", "required", src)


def load_wenet_yaml(path: Pathlike) -> Dict[str, Any]:
    """Read a WeNet training yaml and check its ``dataset_conf``. A missing file or a
    yaml syntax error is a :class:`WenetDataError` naming file (and line)."""
    import yaml

    try:
        with open(path, encoding="utf-8") as f:
            configs = bounded_safe_load(f)  # an alias bomb is a yaml error
    except FileNotFoundError:
        raise WenetDataError("no such file", str(path), kind="missing_file") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        what = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise WenetDataError(f"not valid yaml: {what}", str(path), line=line,
                             kind="config") from None
    if not isinstance(configs, dict):
        raise WenetDataError("expected a yaml mapping (key: value) at the top", str(path),
                             kind="config")
    check_dataset_conf(configs.get("dataset_conf"), source=path)
    return configs


# -- symbol table vs tokenizer_conf.special_tokens --

#: Table entries each special token may map to.
_SPECIAL_NAMES = {"<blank>": ("<blank>",), "<unk>": ("<unk>",),
                  "<sos>": ("<sos/eos>", "<sos>", "<s>"), "<eos>": ("<sos/eos>", "<eos>", "</s>")}


def _table_by_id(table: Union[Pathlike, Mapping[str, int]]) -> Dict[int, tuple]:
    """id -> (unit, 1-based line or None) of a WeNet symbol table file or dict (a later
    line wins, as in WeNet)."""
    if isinstance(table, Mapping):
        return {int(i): (u, None) for u, i in table.items()}
    from wenet_lhotse.text.tokenizer import read_symbol_table

    read_symbol_table(table)  # validates the format, naming file and line
    out: Dict[int, tuple] = {}
    with open(table, encoding="utf-8") as f:
        for no, line in enumerate(f, 1):
            arr = line.split()
            if len(arr) == 2:
                out[int(arr[1])] = (arr[0], no)
    return out


def check_special_tokens(symbol_table: Union[Pathlike, Mapping[str, int]],
                         special_tokens: Optional[Mapping[str, Any]], *,
                         source: Optional[Pathlike] = None,
                         where: str = "tokenizer_conf.special_tokens") -> None:
    """Stop when the ids a WeNet model takes for ``<blank>``, ``<unk>``, ``<sos>``,
    ``<eos>`` are other units of the symbol table.

    WeNet's ``ASRModel`` takes ``<sos>``/``<eos>`` from ``special_tokens``, or
    ``vocab_size - 1`` without it; a table written for the other layout makes it use an
    ordinary unit as sos/eos without a word. Keys other than these four (Whisper's
    ``sot``, ...) are not checked. ``symbol_table``: the file (messages name its lines)
    or a ``{unit: id}`` dict."""
    src = str(source) if source else None
    by_id = _table_by_id(symbol_table)
    name_of_table = ("the symbol table" if isinstance(symbol_table, Mapping)
                     else Path(symbol_table).name)
    vocab_size = len(by_id)
    if special_tokens is not None and not isinstance(special_tokens, Mapping):
        raise WenetConfigError(where, f"expected a mapping, got {_show(special_tokens)}", src)
    tokens = dict(special_tokens or {})
    checks = [(name, tokens.get(name)) for name in _SPECIAL_NAMES if name in tokens]
    if special_tokens is None:
        checks = [("<sos>", vocab_size - 1), ("<eos>", vocab_size - 1)]
    for name, wanted in checks:
        if wanted is None and name in ("<sos>", "<eos>"):
            wanted = vocab_size - 1  # ASRModel: special_tokens.get("<sos>", vocab_size - 1)
        if integer(0)(wanted):
            raise WenetConfigError(f"{where}.{name}", f"expected an integer >= 0, got "
                                                      f"{_show(wanted)}", src)
        unit, line = by_id.get(wanted, (None, None))
        if unit in _SPECIAL_NAMES[name]:
            continue
        if special_tokens is None:
            key, told = where, (f"not set, so WeNet uses vocab_size - 1 = {wanted} as {name}")
        else:
            key, told = f"{where}.{name}", str(wanted)
        at = f" line {line}" if line is not None else ""
        found = (f"{name_of_table}{at} maps id {wanted} to {unit!r}" if unit is not None
                 else f"{name_of_table} has no id {wanted}")
        having = [f"{u} {i}" for i, (u, _) in sorted(by_id.items()) if u in _SPECIAL_NAMES[name]]
        fix = f" (the table has {', '.join(having)})" if having else ""
        raise WenetConfigError(key, f"{told}, but {found}{fix}", src)


#: Tokenizers whose symbol table is a units file with WeNet's special symbols.
_TABLE_TOKENIZERS = ("char", "bpe")


def check_wenet_configs(configs: Mapping[str, Any], *, source: Optional[Pathlike] = None,
                        symbol_table: Union[None, Pathlike, Mapping[str, int]] = None) -> None:
    """The start-up checks of a whole WeNet yaml: :func:`check_dataset_conf` and, for
    the char and BPE tokenizers, :func:`check_special_tokens` on
    ``tokenizer_conf.symbol_table_path`` (or ``symbol_table`` when given)."""
    check_dataset_conf(configs.get("dataset_conf"), source=source)
    if configs.get("tokenizer", "char") not in _TABLE_TOKENIZERS:
        return
    tconf = configs.get("tokenizer_conf") or {}
    table = symbol_table if symbol_table is not None else tconf.get("symbol_table_path")
    if table is None or (not isinstance(table, Mapping) and not Path(table).is_file()):
        return  # the tokenizer reports a missing table itself
    check_special_tokens(table, tconf.get("special_tokens"), source=source)
