"""Kaldi data directory (``wav.scp``, ``text``, optional ``segments``) -> WeNet raw ``data.list``.

The output is line for line what WeNet's ``tools/make_raw_list.py`` writes
(``{"key", "wav", "txt"}`` plus ``start``/``end`` with segments, in the order
of ``text``), but a bad line raises :class:`WenetDataError` naming the file
and line instead of an ``assert``, and the list is written atomically.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Dict, Optional, Tuple, Union

from wenet_lhotse.formats.errors import WenetDataError
from wenet_lhotse.formats.streams import atomic_output

Pathlike = Union[str, os.PathLike]


def _read_table(path: Pathlike, num_fields: int) -> Dict[str, Tuple[str, ...]]:
    table: Dict[str, Tuple[str, ...]] = {}
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f, start=1):
            arr = line.strip().split()
            if not arr:
                continue
            if len(arr) != num_fields:
                raise WenetDataError(
                    f"expected {num_fields} fields, got {len(arr)}", str(path), line=i,
                    kind="format",
                )
            table[arr[0]] = tuple(arr[1:])
    return table


def kaldi_dir_to_raw_list(
    wav_scp: Pathlike,
    text: Pathlike,
    output: Pathlike,
    segments: Optional[Pathlike] = None,
) -> Tuple[Path, int]:
    """Write a WeNet raw list from Kaldi-style files. Returns ``(output, num_lines)``.

    :param wav_scp: ``<recording-id> <audio path>`` per line (no pipes: WeNet reads paths).
    :param text: ``<utterance-id> <transcript>`` per line; the output follows its order.
    :param segments: ``<utterance-id> <recording-id> <start s> <end s>`` per line.
    """
    wavs = _read_table(wav_scp, 2)
    segs = _read_table(segments, 4) if segments is not None else None
    n = 0
    with atomic_output(output, "w", encoding="utf-8") as out, open(text, encoding="utf-8") as f:
        for i, line in enumerate(f, start=1):
            arr = line.strip().split(maxsplit=1)
            if not arr:
                continue
            key, txt = arr[0], (arr[1] if len(arr) > 1 else "")
            if segs is None:
                if key not in wavs:
                    raise WenetDataError(f"key {key!r} is not in {wav_scp}", str(text), line=i,
                                         kind="missing_field")
                item = {"key": key, "wav": wavs[key][0], "txt": txt}
            else:
                if key not in segs:
                    raise WenetDataError(f"key {key!r} is not in {segments}", str(text), line=i,
                                         kind="missing_field")
                rec, start, end = segs[key]
                if rec not in wavs:
                    raise WenetDataError(f"recording {rec!r} of {key!r} is not in {wav_scp}",
                                         str(segments), kind="missing_field")
                item = {"key": key, "wav": wavs[rec][0], "txt": txt,
                        "start": float(start), "end": float(end)}
            out.write(json.dumps(item, ensure_ascii=False) + "\n")
            n += 1
    return Path(output), n


def write_char_units(text: Pathlike, output: Pathlike, non_lang_syms: Optional[Pathlike] = None
                     ) -> Tuple[Path, int]:
    """Build a WeNet char symbol table from a Kaldi ``text`` file, as WeNet's aishell
    recipe does (``tools/text2token.py -s 1 -n 1`` | sort | uniq): ``<blank> 0``,
    ``<unk> 1``, the sorted units from 2 on, ``<sos/eos>`` last. A space becomes ``▁``.
    Returns ``(output, vocab_size)``."""
    from wenet_lhotse.text.tokenizer import CharTokenizer

    # Tokenize with WeNet's own char rules so non-linguistic symbols stay whole.
    syms = ["<blank>", "<unk>"]
    tok = CharTokenizer({s: i for i, s in enumerate(syms)},
                        non_lang_syms=str(non_lang_syms) if non_lang_syms else None,
                        split_with_space=False)
    units = set()
    with open(text, encoding="utf-8") as f:
        for line in f:
            arr = line.strip().split(maxsplit=1)
            if len(arr) == 2:
                units.update(t for t in tok.text2tokens(arr[1]) if t.strip())
    table = syms + sorted(units - set(syms)) + ["<sos/eos>"]
    with atomic_output(output, "w", encoding="utf-8") as out:
        out.write("".join(f"{u} {i}\n" for i, u in enumerate(table)))
    return Path(output), len(table)
