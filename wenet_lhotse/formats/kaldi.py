"""Kaldi data directory (``wav.scp``, ``text``, optional ``segments``) -> WeNet raw ``data.list``.

The output is line for line what WeNet's ``tools/make_raw_list.py`` writes
(``{"key", "wav", "txt"}`` plus ``start``/``end`` with segments, in the order
of ``text``), but a bad line raises :class:`WenetDataError` naming the file
and line instead of an ``assert``, and the list is written atomically.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, Optional, Tuple

from lhotse.utils import Pathlike

from wenet_lhotse.errors import WenetDataError
from wenet_lhotse.io.lines import bounded_lines
from wenet_lhotse.io.streams import atomic_output


def _read_table(path: Pathlike, num_fields: int) -> Dict[str, Tuple[str, ...]]:
    table: Dict[str, Tuple[str, ...]] = {}
    with open(path, encoding="utf-8") as f:
        for i, line in bounded_lines(f, str(path)):
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
        for i, line in bounded_lines(f, str(text)):
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
