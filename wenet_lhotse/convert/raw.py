"""WeNet raw ``data.list`` -> Lhotse cuts manifest (``cuts.jsonl.gz``), with the
audio headers probed in parallel.

The recordings in the manifest point at the original audio files (nothing is
copied or re-encoded). Lines are parsed by the formats reader
(:class:`~wenet_lhotse.formats.raw_list.LazyWenetRawListIterator`), so the cut
layout and every error message are the same as :func:`read_raw_list`'s; only the
header reads run in a pool, over blocks of lines, and results come back in list
order. Duplicate keys are detected in order, in the calling process.
"""

from __future__ import annotations

import dataclasses
import functools
import gzip
import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence, Tuple, Union

from lhotse.cut import Cut, MonoCut
from lhotse.utils import Pathlike

from wenet_lhotse.convert.executor import map_tasks
from wenet_lhotse.errors import SkippedItem, SkipReport
from wenet_lhotse.io.outputs import OutputGuard, refuse_clobber
from wenet_lhotse.io.parallel import map_bounded
from wenet_lhotse.io.policy import ReadPolicy
from wenet_lhotse.io.remote import is_remote
from wenet_lhotse.io.streams import as_path_list, atomic_output
from wenet_lhotse.sources.raw_lines import parse_raw_lines

logger = logging.getLogger(__name__)

#: gzip level of written manifests (9, gzip's default, costs 2-3x the time for ~5% size).
GZIP_LEVEL = 6


@dataclass
class ImportResult:
    """What :func:`import_raw` wrote."""

    out_path: Union[Path, str]  # str: an object-store URL
    num_cuts: int = 0
    seconds_of_audio: float = 0.0  # total duration of the imported cuts (seconds)
    skip_report: SkipReport = field(default_factory=SkipReport)
    wall_seconds: float = 0.0


#: A parsed line as a manifest line: (cut id, duration in seconds, JSON line bytes).
_JsonCut = Tuple[str, float, bytes]


def _plain(obj):
    """``dataclasses.asdict`` minus None fields, without its deep copies (the result is
    serialized at once, never mutated)."""
    if dataclasses.is_dataclass(obj):
        out = {}
        for f in _fields(type(obj)):
            v = getattr(obj, f)
            if v is not None:
                out[f] = _plain(v)
        return out
    if isinstance(obj, (list, tuple)):
        return [_plain(x) for x in obj]
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    return obj


@functools.cache
def _fields(cls) -> Tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


def cut_to_dict(cut: Cut) -> dict:
    """``cut.to_dict()``, about 5x faster for the plain cuts a raw list yields
    (a MonoCut over one recording, no transforms, alignments or nested manifests);
    anything else goes through Lhotse's own ``to_dict``."""
    rec = cut.recording
    if (type(cut) is not MonoCut or rec is None or rec.transforms is not None
            or cut.features is not None
            or any(s.alignment is not None for s in cut.supervisions)
            or any(dataclasses.is_dataclass(v) for v in (cut.custom or {}).values())):
        return cut.to_dict()
    d = _plain(cut)
    d["type"] = "MonoCut"
    return d


def _json_cut(cut: Cut) -> _JsonCut:
    """A parsed line as a manifest line (runs in the pool: it serializes too)."""
    line = json.dumps(cut_to_dict(cut), ensure_ascii=False).encode("utf-8") + b"\n"
    return cut.id, cut.duration, line


def iter_raw_cuts(paths: Union[Pathlike, Sequence[Pathlike]], **kwargs: Any) -> Iterator[Cut]:
    """The cuts of WeNet raw list(s), in list order, with audio headers read by a pool.
    ``kwargs``: the keywords of :func:`iter_raw_cuts_with_lines` (``wav_root``,
    ``strict``, ``skip_report``, ``policy``, ``num_workers``, ``executor``,
    ``check_duplicates``, ``cluster``, ...)."""
    for cut, _, _ in iter_raw_cuts_with_lines(paths, **kwargs):
        yield cut


def iter_raw_cuts_with_lines(
    paths: Union[Pathlike, Sequence[Pathlike]],
    *,
    wav_root: Optional[Pathlike] = None,
    num_workers: int = 4,
    executor: str = "process",
    check_duplicates: bool = True,
    as_json: bool = False,
    probe: bool = True,
    cluster: Optional[str] = None,
    yield_skips: bool = False,
    policy: Optional[ReadPolicy] = None,
) -> Iterator[Tuple[Union[Cut, _JsonCut, SkippedItem], str, int]]:
    """``(cut, list file, 1-based line)`` for each line of WeNet raw list(s), in list
    order, with audio headers read by a pool.

    Same cuts and errors as :func:`~wenet_lhotse.formats.raw_list.read_raw_list`;
    memory stays bounded (at most ``2 * num_workers`` blocks of :data:`BLOCK_LINES`
    lines in flight) apart from the duplicate-key set (32-64 bytes per key).

    :param num_workers: pool size; 0 or 1 parses in the calling thread.
    :param executor: ``"process"`` (scales past the GIL) or ``"thread"``.
    :param check_duplicates: report a repeated key (the later line) as an error.
    :param as_json: yield a :data:`_JsonCut` (id, duration, serialized line) instead of
        the cut, so that the pool, not the caller, does the serialization.
    :param probe: ``False`` trusts lines carrying ``duration``/``sample_rate``.
    :param cluster: a Dask scheduler address: blocks are parsed (headers probed) on
        its workers, which must see the audio at the same paths.
    :param yield_skips: also yield ``(SkippedItem, file, line)`` for each line skipped
        (fault-tolerant mode; it is recorded in ``skip_report`` too), so that a caller
        can count positions in the input, good and bad lines alike.
    :param policy: strict or skip into its ``skip_report``, URL protocols and network
        limits of the probes (:class:`~wenet_lhotse.io.policy.ReadPolicy`; default:
        strict).
    """
    policy = (policy or ReadPolicy())
    if cluster:
        mapper = functools.partial(map_tasks, cluster=cluster)
    else:
        mapper = functools.partial(map_bounded, num_workers=num_workers, executor=executor)
    yield from parse_raw_lines(as_path_list(paths), policy, mapper=mapper, wav_root=wav_root,
                               check_duplicates=check_duplicates, probe=probe,
                               serialize=_json_cut if as_json else None,
                               yield_skips=yield_skips)


def import_raw(
    data_list: Union[Pathlike, Sequence[Pathlike]],
    out_path: Pathlike,
    *,
    progress: bool = False,
    policy: Optional[ReadPolicy] = None,
    **kwargs: Any,
) -> ImportResult:
    """Convert WeNet raw list(s) to a Lhotse cuts manifest whose recordings point at
    the original audio files. The manifest is written atomically (temp file + rename).

    :param out_path: ``.jsonl.gz`` (gzip) or ``.jsonl`` output.
    :param progress: show a tqdm bar (unit: lines turned into cuts).
    :param policy: its ``strict`` (default True: raise on the first bad line; else
        skip, log and count it in its ``skip_report``), URL protocols and network
        limits.
    :param kwargs: how the lines are read, the keywords of
        :func:`iter_raw_cuts_with_lines`: ``wav_root``; ``num_workers``
        (header-probing pool size, default 4); ``executor``; ``check_duplicates``
        (default True: detect repeated keys, 32-64 bytes of memory per key; False keeps
        memory flat however long the list is); ``probe`` (see
        :func:`~wenet_lhotse.formats.raw_list.read_raw_list`: False trusts lines that
        carry ``duration`` and ``sample_rate``); ``cluster`` (a Dask scheduler address:
        headers are probed on its workers; the manifest is still written once, here,
        and ``out_path`` may be an ``s3://`` URL).
    """
    from tqdm.auto import tqdm

    policy = (policy or ReadPolicy())
    report = policy.skip_report
    assert report is not None
    out = out_path if is_remote(str(out_path)) else Path(out_path)
    refuse_clobber(out, as_path_list(data_list))
    guard = OutputGuard(out)  # an existing output: is it one of the listed audio files?
    res = ImportResult(out_path=out, skip_report=report)
    start = time.perf_counter()
    items = iter_raw_cuts_with_lines(data_list, as_json=True, policy=policy, **kwargs)
    with atomic_output(out, "wb") as raw_f:
        # no time stamp, and the output's name (not the temporary file's) in the header:
        # equal input gives equal bytes, locally, with -j or on a cluster
        f = (gzip.GzipFile(filename=str(out).rsplit("/", 1)[-1], fileobj=raw_f, mode="wb",
                           mtime=0, compresslevel=GZIP_LEVEL)
             if str(out).endswith(".gz") else raw_f)
        with tqdm(desc="import", unit="utt", disable=not progress) as bar:
            for (_, duration, line), _, _ in items:
                if guard.active:
                    guard.check_cut(json.loads(line))
                f.write(line)
                res.num_cuts += 1
                res.seconds_of_audio += duration
                bar.update(1)
                if len(report):
                    bar.set_postfix(skipped=len(report), refresh=False)
        if f is not raw_f:
            f.close()  # writes the gzip trailer; the temp file itself stays open
    res.wall_seconds = time.perf_counter() - start
    logger.info("imported %d cuts (%.2f h) into %s; %s", res.num_cuts,
                res.seconds_of_audio / 3600, out, report.summary())
    return res
