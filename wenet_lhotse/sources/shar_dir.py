"""The Lhotse Shar directory layout, read in one place.

A Shar directory holds, per shard ``i`` (6 digits, as Lhotse's ``SharWriter`` names
them), ``cuts.<i>.jsonl.gz`` plus one file per field, e.g. ``recording.<i>.tar``::

    OUT/cuts.000000.jsonl.gz   OUT/recording.000000.tar
    OUT/cuts.000001.jsonl.gz   OUT/recording.000001.tar   ...

:func:`shar_files` is the one globber: every ``<field>.<index>.<ext>`` file by field
and shard index, in a local directory or under an object-store prefix
(``s3://b/shar``). The readers, the validator and the converter build on it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional, Tuple

from lhotse.utils import Pathlike

from wenet_lhotse.io.remote import is_remote, remote_ls


def shar_shard_number(path: Pathlike) -> Optional[int]:
    """``cuts.000012.jsonl.gz`` -> 12; None when the name has no shard number."""
    parts = Path(path).name.split(".")
    if len(parts) >= 3 and parts[1].isdigit():
        return int(parts[1])
    return None


def shar_files(in_dir: Pathlike) -> Dict[str, Dict[int, str]]:
    """``{field: {shard number: path}}`` of the ``<field>.<index>.<ext>`` files in
    ``in_dir`` (a missing directory has none)."""
    found: Dict[str, Dict[int, str]] = {}
    if is_remote(str(in_dir)):  # s3://bucket/shar/ ...: the objects under that prefix
        names: List[str] = remote_ls(str(in_dir))
    else:
        d = Path(in_dir)
        if not d.is_dir():
            return found
        names = [str(p) for p in sorted(d.iterdir())]
    for p in names:
        index = shar_shard_number(p)
        if index is not None:
            found.setdefault(p.rsplit("/", 1)[-1].split(".", 1)[0], {})[index] = p
    return found


def is_shar_dir(path: Pathlike) -> bool:
    """True for a directory holding at least one ``cuts.<index>.jsonl*`` file."""
    return any(".jsonl" in Path(p).name for p in shar_files(path).get("cuts", {}).values())


def cuts_files(in_dir: Pathlike) -> List[str]:
    """The ``cuts.*.jsonl*`` manifests of a Shar directory, in shard order."""
    cuts = shar_files(in_dir).get("cuts", {})
    return [cuts[i] for i in sorted(cuts)]


def shar_fields(in_dir: Pathlike) -> Dict[str, List[str]]:
    """``{field: [path per shard]}`` of a complete Shar directory, by shard index, as
    ``CutSet.from_shar(fields=)`` takes it. Raises ValueError when there are no cuts
    or a field's shards do not match the cuts' shards."""
    found = shar_files(in_dir)
    if "cuts" not in found:
        raise ValueError(f"{in_dir}: no cuts.*.jsonl* files: not a Shar directory")
    n = len(found["cuts"])
    for f, shards in found.items():
        if sorted(shards) != list(range(n)):
            raise ValueError(f"{in_dir}: field {f!r} has shards {sorted(shards)}, "
                             f"cuts has {n}")
    return {f: [shards[i] for i in range(n)] for f, shards in found.items()}


def shard_paths(out_dir: Pathlike, index: int, audio_field: str = "recording") -> Tuple[Path, Path]:
    """``(cuts manifest, audio tar)`` of Shar shard ``index`` in ``out_dir``."""
    out_dir = Path(out_dir)
    return (out_dir / f"cuts.{index:06d}.jsonl.gz", out_dir / f"{audio_field}.{index:06d}.tar")
