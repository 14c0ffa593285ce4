"""Read a data source completely, decoding all audio, and list every problem.

Problems found by the WeNet readers (bad JSON, missing fields or files,
unpaired tar members, duplicate keys, ...) come from their fault-tolerant mode;
audio that has a valid header but fails to decode (or decodes to nothing) is
found here. Each problem names the file and line (lists, manifests) or the tar
and member (shards, Shar).
"""

from __future__ import annotations

import gzip
import io
import json
import logging
from dataclasses import dataclass, field
from typing import Dict, Iterator, List, Optional, Tuple

from lhotse.cut import Cut
from lhotse.serialization import deserialize_item
from lhotse.utils import Pathlike

from wenet_lhotse.convert.executor import map_tasks
from wenet_lhotse.errors import SkipReport, WenetDataError, short_error
from wenet_lhotse.formats.keyset import KeySet
from wenet_lhotse.formats.raw_list import read_raw_list
from wenet_lhotse.formats.remote import is_remote, open_remote
from wenet_lhotse.formats.shard_reader import ShardEntry, read_one_tar, read_shard_entries
from wenet_lhotse.sources.detect import detect_input_kind
from wenet_lhotse.sources.shar_dir import shar_files

logger = logging.getLogger(__name__)


@dataclass
class ValidationResult:
    """Outcome of :func:`validate`. ``problems`` lists every bad item with its location."""

    path: str
    kind: str
    num_ok: int = 0
    seconds_ok: float = 0.0  # total audio duration of the good utterances (seconds)
    problems: SkipReport = field(default_factory=SkipReport)

    @property
    def ok(self) -> bool:
        return len(self.problems) == 0


def _check_audio(cut: Cut) -> Optional[str]:
    """None when the cut's audio decodes to the advertised number of samples."""
    try:
        audio = cut.load_audio()
    except Exception as err:  # any decoder error is a finding, not a crash
        return f"audio does not decode: {short_error(err)}"
    if audio.shape[-1] == 0:
        return "audio is empty (0 samples)"
    if cut.num_samples is not None and abs(audio.shape[-1] - cut.num_samples) > 1:
        return f"audio has {audio.shape[-1]} samples, header says {cut.num_samples}"
    return None


class _LineFinder:
    """Finds the line of a key in a raw list; the index is built only on first use."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._index: Optional[Dict[str, int]] = None

    def __call__(self, key: str) -> Optional[int]:
        if self._index is None:
            self._index = {}
            with open(self.path, encoding="utf-8", errors="replace") as f:
                for no, line in enumerate(f, 1):
                    try:
                        k = json.loads(line).get("key")
                    except (json.JSONDecodeError, AttributeError):
                        continue
                    self._index.setdefault(k, no)
        return self._index.get(key)


@dataclass
class _Checked:
    """What one task found in one tar or Shar shard: per cut ``(id, source, member,
    problem or None, duration in seconds)``, in order, and the reader's problems."""

    cuts: List[Tuple[str, str, Optional[str], Optional[str], float]]
    problems: SkipReport


def _check_tar(tar: ShardEntry) -> _Checked:
    """Decode every utterance of one WeNet tar (a task)."""
    problems = SkipReport(log=False)
    cuts = [(c.id, tar.url, c.id, _check_audio(c), c.duration)
            for c in read_one_tar(tar, strict=False, skip_report=problems)]
    return _Checked(cuts, problems)


def _check_shar_shard(fields: Dict[str, List[str]]) -> _Checked:
    """Decode every utterance of one Shar shard (a task); a broken tar or manifest
    ends the shard with one problem."""
    from lhotse import CutSet

    problems = SkipReport(log=False)
    tar_name = fields["recording"][0]
    cuts = []
    try:
        for c in CutSet.from_shar(fields=fields):
            cuts.append((c.id, tar_name, c.id, _check_audio(c), c.duration))
    except Exception as err:
        problems.add(WenetDataError(f"shard unreadable: {type(err).__name__}: {err}",
                                    tar_name, kind="truncated"), log=False)
    return _Checked(cuts, problems)


def validate(path: Pathlike, *, progress: bool = False, num_jobs: int = 1,
             cluster: Optional[str] = None) -> ValidationResult:
    """Read ``path`` (raw list, shard list, cuts manifest or Shar directory) completely,
    decoding every utterance's audio. Never raises for bad data: every problem is
    recorded in the result.

    :param progress: show a tqdm bar (unit: utterances).
    :param num_jobs: local processes, one tar or Shar shard each (shard lists, Shar).
    :param cluster: a Dask scheduler address: tars / Shar shards are checked on its
        workers. Problems are listed in input order either way.
    """
    from tqdm.auto import tqdm

    path = str(path)
    problems = SkipReport(log=False)  # printed by the caller, not logged twice
    try:
        kind = detect_input_kind(path)
    except WenetDataError as err:
        problems.add(err, log=False)
        return ValidationResult(path, "unknown", problems=problems)
    res = ValidationResult(path, kind, problems=problems)
    bar = tqdm(desc="validate", unit="utt", disable=not progress)

    seen = KeySet()  # per-tar/per-shard readers cannot see repeats across tars

    def check(key: str, source: str, member: Optional[str], msg: Optional[str],
              duration: float, line: Optional[int] = None) -> None:
        if kind in ("shard", "shar") and not seen.add(key):
            problems.add(WenetDataError(f"duplicate key {key!r} (seen earlier in this "
                                        "input)", source, line=line, member=member,
                                        kind="duplicate"), log=False)
            bar.update(1)
            return
        if msg is None:
            res.num_ok += 1
            res.seconds_ok += duration
        else:
            problems.add(WenetDataError(f"{key!r}: {msg}", source, line=line, member=member,
                                        kind="bad_audio"), log=False)
        bar.update(1)

    try:
        if kind == "raw":
            find = _LineFinder(path)
            for cut in read_raw_list([path], strict=False, skip_report=problems):
                msg = _check_audio(cut)
                if msg is None:
                    res.num_ok += 1
                    res.seconds_ok += cut.duration
                else:
                    problems.add(WenetDataError(
                        f"{cut.id!r} ({cut.recording.sources[0].source}): {msg}", path,
                        line=find(cut.id), kind="bad_audio"), log=False)
                bar.update(1)
        elif kind == "cuts":
            _validate_manifest(path, problems, check)
        else:
            jobs = (read_shard_entries([path]) if kind == "shard"
                    else _shar_jobs(path, problems))
            task = _check_tar if kind == "shard" else _check_shar_shard
            for _, part in map_tasks(task, jobs, num_jobs=num_jobs, cluster=cluster):
                problems.extend(part.problems.items)
                for key, source, member, msg, duration in part.cuts:
                    check(key, source, member, msg, duration)
    finally:
        bar.close()
    if res.num_ok == 0 and not len(problems):
        # WeNet would start training on nothing; an empty input is almost always a mistake.
        problems.add(WenetDataError("no utterances in it", path, kind="empty"), log=False)
    return res


def _open_text(path: str):
    """A (gzipped) text file, local or on object storage, as UTF-8 text."""
    if is_remote(path):
        raw = open_remote(path)
        return io.TextIOWrapper(gzip.GzipFile(fileobj=raw) if path.endswith(".gz") else raw,
                                encoding="utf-8")
    return (gzip.open if path.endswith(".gz") else open)(path, "rt", encoding="utf-8")


def _validate_manifest(path: str, problems: SkipReport, check) -> None:
    seen = set()
    no = 0
    try:
        with _open_text(path) as f:
            for no, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    cut = deserialize_item(json.loads(line))
                except Exception as err:
                    problems.add(WenetDataError(f"not a Lhotse cut: {err}", path, line=no,
                                                kind="json"), log=False)
                    continue
                if cut.id in seen:
                    problems.add(WenetDataError(f"duplicate cut id {cut.id!r}", path, line=no,
                                                kind="duplicate"), log=False)
                    continue
                seen.add(cut.id)
                check(cut.id, path, None, _check_audio(cut), cut.duration, line=no)
    except (OSError, EOFError, UnicodeDecodeError) as err:  # cut short, not gzip, bad bytes
        problems.add(WenetDataError(f"unreadable after line {no}: {err}", path, line=no + 1,
                                    kind="truncated"), log=False)


def _shar_jobs(in_dir: str, problems: SkipReport) -> Iterator[Dict[str, List[str]]]:
    """The fields of each complete Shar shard, in order; unpaired files are problems."""
    files = shar_files(in_dir)
    tars = {f: {i: p for i, p in by_index.items() if p.endswith(".tar")}
            for f, by_index in files.items() if f != "cuts"}
    cut_files = {i: p for i, p in files.get("cuts", {}).items() if ".jsonl" in p}
    for i, cuts_path in sorted(cut_files.items()):
        fields = {"cuts": [cuts_path]}
        fields.update({f: [by_index[i]] for f, by_index in tars.items() if i in by_index})
        if "recording" not in fields:
            problems.add(WenetDataError(f"no recording.{i:06d}.tar next to it", cuts_path,
                                        kind="unpaired"), log=False)
            continue
        yield fields
    others = {i for by_index in tars.values() for i in by_index} - set(cut_files)
    for i in sorted(others):
        problems.add(WenetDataError("tar without its cuts manifest", str(in_dir),
                                    member=f"*.{i:06d}.tar", kind="unpaired"), log=False)
