"""WeNet raw ``data.list`` -> lazy Lhotse ``CutSet`` (the reader; the writer, cuts -> raw
list, is :mod:`.raw_list_writer`, re-exported here).

A raw list has one JSON object per line (UTF-8)::

    {"key": "BAC009S0724W0121", "wav": "/data/BAC009S0724W0121.wav", "txt": "..."}

with optional ``start``/``end`` (seconds inside ``wav``), ``speaker``, ``lang``,
and any other fields. :func:`read_raw_list` maps a line to a cut:

* ``cut.id == key``; the recording (id ``key``) points at ``wav``, with its
  duration (seconds) and sampling rate (Hz) read from the audio header (no decoding);
* ``start``/``end`` make the cut cover samples ``[int(start * sr), int(end * sr))`` of
  the recording, the samples WeNet's ``decode_wav`` reads;
* one supervision over the whole cut: ``text=txt``, ``speaker``, ``language=lang``;
* every other field is kept, unchanged, in ``cut.custom``.

Relative ``wav`` paths resolve against ``wav_root`` when given, else against the
working directory at the time :func:`read_raw_list` is called (WeNet opens them
relative to the working directory); the recordings hold the resulting absolute paths.
A ``wav`` may also be an ``http(s)://`` URL or an object-storage URL (``s3://...``,
any fsspec URL; not in WeNet, whose ``torchaudio.load`` reads local files): its
header is read in small range requests (:mod:`~wenet_lhotse.io.remote_audio`),
retried like any remote read and within the network time limits, and the recording
points at the URL.
"""

from __future__ import annotations

import codecs
import json
import os
from typing import Callable, Iterator, Optional, Sequence, Union

from lhotse import CutSet, Recording, SupervisionSegment
from lhotse.audio import AudioSource
from lhotse.cut import MonoCut, MultiCut
from lhotse.lazy import Dillable
from lhotse.utils import Pathlike, compute_num_samples

from wenet_lhotse.errors import WenetDataError, reraise_worker_death, short_error
from wenet_lhotse.formats.audio import probe_recording, sampling_rate_problem
from wenet_lhotse.formats.checks import TOO_DEEP, is_finite_number, key_problem, text_problem
from wenet_lhotse.formats.keyset import KeySet
from wenet_lhotse.formats.layout import CORE_FIELDS
from wenet_lhotse.io.access import open_regular
from wenet_lhotse.io.policy import PolicyHolder, ReadPolicy
from wenet_lhotse.io.remote import is_remote
from wenet_lhotse.io.remote_audio import is_audio_url, probe_remote_audio
from wenet_lhotse.io.streams import as_path_list, open_input

#: An ``end`` this far (seconds) past the end of the audio is clamped, not an error
#: (segments files round times; WeNet just reads fewer samples).
END_TOLERANCE = 0.01


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


class LazyWenetRawListIterator(PolicyHolder, Dillable):
    """Iterates the cuts of one or more WeNet raw lists, streaming line by line.

    Memory does not grow with the list, except for the duplicate-key set
    (:class:`~wenet_lhotse.formats.keyset.KeySet`, 32-64 bytes per key) when
    ``check_duplicates`` is on. Picklable (DataLoader workers); ``len()`` is not
    offered, since it would need a full pass with header reads.

    Skipped items (``policy.strict`` False) are logged and recorded in the policy's
    ``skip_report`` (a worker process records into its own copy).
    """

    def __init__(
        self,
        paths: Union[Pathlike, Sequence[Pathlike]],
        wav_root: Optional[Pathlike] = None,
        probe: bool = True,
        check_duplicates: bool = True,
        *,
        policy: Optional[ReadPolicy] = None,
    ) -> None:
        # Absolute now: iterating later from another directory reads the same files.
        self.paths = [p if is_remote(p) else os.path.abspath(p) for p in as_path_list(paths)]
        self.wav_root = os.path.abspath(str(wav_root) if wav_root is not None else os.getcwd())
        self.policy = (policy or ReadPolicy())
        self.probe = probe
        self.check_duplicates = check_duplicates

    def __iter__(self) -> Iterator:
        self.policy.lend_to_lhotse()  # the audio URLs it allowed, opened later by Lhotse
        seen = KeySet() if self.check_duplicates else None
        for path in self.paths:
            try:
                f = open_input(path, policy=self.policy) if is_remote(path) \
                    else open_regular(path)
            except OSError as e:
                self.policy.handle(
                    WenetDataError(f"cannot open list: {e}", path, kind="missing_file"))
                continue
            except WenetDataError as e:  # a FIFO or device, refused before it blocks
                self.policy.handle(e)
                continue
            with f:
                for lineno, raw in self.policy.lines(f, path):
                    try:
                        cut = self._parse(raw, path, lineno, seen)
                    except WenetDataError as err:
                        self.policy.handle(err)
                        continue
                    if cut is not None:
                        yield cut

    def parse_line(self, raw: bytes, path: str, lineno: int, seen: Optional[KeySet] = None):
        """One raw line (bytes, with or without its line ending) -> cut, or None for an
        empty line; raises :class:`WenetDataError` naming ``path:lineno``. For callers
        that split the work themselves (e.g. parallel header probing)."""
        return self._parse(raw, path, lineno, seen)

    def _parse(self, raw: bytes, path: str, lineno: int, seen: Optional[KeySet]):
        try:
            return self._parse_line(raw, path, lineno, seen)
        except RecursionError:  # json (and walking its result) on '[[[[...'
            raise WenetDataError(TOO_DEEP, path, line=lineno, kind="json") from None

    def _item(self, obj: dict, path: str, fail: Callable[..., WenetDataError]) -> dict:
        """The WeNet item a parsed line stands for (here the line); another JSON-lines
        layout translates it (``fail(msg, kind)`` for a bad line), then every check runs."""
        return obj

    def _parse_line(self, raw: bytes, path: str, lineno: int, seen: Optional[KeySet]):
        data = raw.rstrip(b"\r\n")  # LF and CRLF endings
        if lineno == 1 and data.startswith(codecs.BOM_UTF8):
            data = data[len(codecs.BOM_UTF8):]
        if not data.strip():
            return None  # empty lines are skipped silently

        def fail(msg: str, kind: str) -> WenetDataError:
            return WenetDataError(msg, path, line=lineno, kind=kind)

        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise fail(f"line is not valid UTF-8 (byte {e.start})", "encoding") from None
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as e:
            raise fail(f"malformed JSON: {e.msg} (column {e.colno})", "json") from None
        if not isinstance(obj, dict):
            raise fail(f"expected a JSON object, got {type(obj).__name__}", "json")
        obj = self._item(obj, path, fail)
        for name in ("key", "wav"):
            if name not in obj:
                raise fail(f"missing {name!r}", "missing_field")
            if not isinstance(obj[name], str) or not obj[name]:
                raise fail(f"{name!r} must be a non-empty string", "invalid")
        key, wav = obj["key"], obj["wav"]
        unsafe = key_problem(key)
        if unsafe is not None:
            raise fail(f"unsafe key {key[:40]!r}: {unsafe}", "unsafe_key")
        unsafe = self.policy.url_problem(wav)
        if unsafe is not None:
            raise fail(f"'wav' {wav[:60]!r}: {unsafe}", "refused")
        if b"\\u" in data:  # only a \u escape can make a lone surrogate
            bad_text = text_problem(obj)
            if bad_text is not None:
                raise fail(bad_text, "encoding")
        for name in ("txt", "speaker", "lang"):
            if obj.get(name) is not None and not isinstance(obj[name], str):
                raise fail(f"{name!r} must be a string", "invalid")
        for name in ("start", "end"):
            if obj.get(name) is not None and not _is_number(obj[name]):
                raise fail(f"{name!r} must be a number (seconds)", "invalid")
            if obj.get(name) is not None and not is_finite_number(obj[name]):
                raise fail(f"{name!r} must be finite, got {obj[name]} (seconds)",
                           "bad_segment")

        # an absolute wav, or a URL, stays as is
        audio_path = wav if is_audio_url(wav) else os.path.join(self.wav_root, wav)
        recording = self._recording(key, audio_path, obj, fail)
        unsafe = sampling_rate_problem(recording.sampling_rate)
        if unsafe is not None:  # a forged header: resampling it would take gigabytes
            raise fail(f"{audio_path}: {unsafe}", "bad_audio")
        start = float(obj.get("start") or 0.0)
        end = float(obj["end"]) if obj.get("end") is not None else recording.duration
        if end > recording.duration:
            if end > recording.duration + END_TOLERANCE:
                raise fail(
                    f"end={end} s is past the end of {audio_path} "
                    f"({recording.duration} s)",
                    "bad_segment",
                )
            end = recording.duration
        if start < 0 or end <= start:
            raise fail(f"bad segment start={start} end={end} (seconds)", "bad_segment")
        if seen is not None and not seen.add(key):
            raise fail(f"duplicate key {key!r} (first seen earlier in this input)", "duplicate")

        if obj.get("start") is not None or obj.get("end") is not None:
            # WeNet's decode_wav reads samples [int(start * sr), int(end * sr)): put the
            # cut exactly there (Lhotse rounds start * sr to the nearest sample instead).
            sr = recording.sampling_rate
            first, last = int(start * sr), int(end * sr)
            if last <= first:  # WeNet would decode no sample; writers refuse it too
                raise fail(f"segment start={obj.get('start')} end={obj.get('end')} s holds "
                           f"no sample at {sr} Hz", "bad_segment")
            start, end = first / sr, last / sr
        # The cut ``recording.to_cut()`` makes, built once with its final fields
        # (not built and then copied: a Lhotse cut costs a setattr hook per field).
        mono = recording.num_channels == 1
        channel = recording.channel_ids[0] if mono else recording.channel_ids
        duration = end - start
        sup = SupervisionSegment(
            id=key,
            recording_id=recording.id,
            start=0.0,
            duration=duration,
            channel=channel,
            text=obj.get("txt"),
            speaker=obj.get("speaker"),
            language=obj.get("lang"),
        )
        custom = {k: v for k, v in obj.items() if k not in CORE_FIELDS}
        return (MonoCut if mono else MultiCut)(
            id=recording.id, start=start, duration=duration, channel=channel,
            supervisions=[sup], recording=recording, custom=custom or None)

    def _recording(self, key: str, audio_path: str, obj: dict, fail) -> Recording:
        if not self.probe and is_finite_number(obj.get("duration")) and is_finite_number(
            obj.get("sample_rate")
        ) and obj["duration"] > 0 and obj["sample_rate"] > 0:
            # Trust the line's own metadata: no file access at all (see read_raw_list).
            sr = int(obj["sample_rate"])
            duration = float(obj["duration"])
            return Recording(
                id=key,
                sources=[AudioSource(type="url" if is_audio_url(audio_path) else "file",
                                     channels=[0], source=audio_path)],
                sampling_rate=sr,
                num_samples=compute_num_samples(duration, sr),
                duration=duration,
            )
        if is_audio_url(audio_path):
            recording = _probe_url(audio_path, key, fail, self.policy)
        elif not os.path.isfile(audio_path):
            if os.path.exists(audio_path):  # a FIFO or device: reading it could block
                raise fail(f"audio path is not a regular file: {audio_path}", "bad_audio")
            raise fail(f"audio file not found: {audio_path}", "missing_audio")
        else:
            try:
                recording = probe_recording(audio_path, key)
            except Exception as e:  # lhotse wraps every backend's failure
                reraise_worker_death(e)
                why = short_error(e, audio=audio_path)
                raise fail(f"cannot read audio header of {audio_path}: {why}",
                           "bad_audio") from None
        if recording.num_samples == 0:
            raise fail(f"audio file has no samples: {audio_path}", "bad_audio")
        return recording


def read_raw_list(
    paths: Union[Pathlike, Sequence[Pathlike]],
    *,
    wav_root: Optional[Pathlike] = None,
    probe: bool = True,
    check_duplicates: bool = True,
    policy: Optional[ReadPolicy] = None,
) -> CutSet:
    """Open WeNet raw list(s) as a lazy :class:`~lhotse.CutSet` (see the module doc
    for the cut layout). Several ``paths`` are read one after another.

    :param wav_root: directory that relative ``wav`` paths resolve against;
        default: the working directory now.
    :param probe: True (default): read every audio header (duration in seconds,
        sampling rate in Hz). False: a line carrying numeric ``duration`` (seconds) and
        ``sample_rate`` (Hz) fields is trusted without touching the file (assumed mono;
        missing or bad audio then surfaces only when it is loaded); other lines are
        still probed.
    :param check_duplicates: detect repeated keys (the later line is the bad one);
        costs 32-64 bytes per key. Turn off for O(1) memory on huge lists.
    :param policy: how to read (:class:`~wenet_lhotse.io.policy.ReadPolicy`: strict or
        skip, URL protocols, network limits); ``strict``/``skip_report`` make one
        when it is not given (default strict, as WeNet).
    """
    policy = (policy or ReadPolicy())
    for path in as_path_list(paths):
        if not is_remote(path) and not os.path.isfile(path):
            raise WenetDataError("no such list file", path, kind="missing_file")
    return CutSet(
        LazyWenetRawListIterator(
            paths,
            wav_root=wav_root,
            probe=probe,
            check_duplicates=check_duplicates,
            policy=policy,
        )
    )


def _probe_url(url: str, key: str, fail, policy: ReadPolicy) -> Recording:
    """:func:`~wenet_lhotse.io.remote_audio.probe_remote_audio` (within the
    ``policy``'s limits and URL protocols), its failures as errors of the line
    (``fail``)."""
    try:
        return probe_remote_audio(url, key, policy)
    except WenetDataError as e:  # retried already: missing, denied, or given up
        if e.kind == "missing_file":
            raise fail(f"audio file not found: {url} ({e.message})", "missing_audio") from None
        raise fail(f"cannot read audio header of {url}: {e.message}", e.kind) from None
    except Exception as e:  # Lhotse's backends on a format libsndfile does not read
        reraise_worker_death(e)  # torch's SIGCHLD error, raised during the read
        raise fail(f"cannot read audio header of {url}: {short_error(e)}",
                   "bad_audio") from None
