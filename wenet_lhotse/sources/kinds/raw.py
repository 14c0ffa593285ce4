"""``raw``: a WeNet ``data.list`` (JSON lines ``{"key", "wav", "txt"}``), read by
:func:`~wenet_lhotse.formats.raw_list.read_raw_list`.

Detected by a first JSON line with ``"key"``; it is also the fallback for any other
JSON first line (a bad first line is then named by the reader) and for an empty file.
Map-style loading holds its cuts in memory (durations from the audio headers, probed
once with ``lhotse_conf.probe_cache``).
"""

from __future__ import annotations

from typing import Any, Sequence

from lhotse import CutSet

from wenet_lhotse.formats.raw_list import read_raw_list
from wenet_lhotse.io.policy import ReadPolicy
from wenet_lhotse.sources.kinds.base import InputKind, PositionedReaders
from wenet_lhotse.sources.kinds.sniff import MAYBE, NO, SURE, FirstLine


class RawKind(InputKind):
    name = "raw"
    description = "WeNet raw data.list (JSON lines with key, wav, txt)"
    wenet = True
    reader = staticmethod(read_raw_list)

    def sniff(self, first: FirstLine) -> int:
        if not first.line:
            return MAYBE  # an empty list
        if not first.is_json:
            return NO
        record = first.record
        return SURE if record is not None and "key" in record else MAYBE

    def open(self, paths: Sequence[str], policy: ReadPolicy, *, wav_root: Any = None,
             **_: Any) -> CutSet:
        return read_raw_list(paths, wav_root=wav_root, strict=policy.strict,
                             skip_report=policy.skip_report)

    def map_reader(self, spec: Any, readers: PositionedReaders) -> Any:
        if not readers.probe_cache:
            return super().map_reader(spec, readers)
        from wenet_lhotse.sources.probe_cache import probed_raw_list

        policy, cache = readers.policy, readers.probe_cache
        probed = probed_raw_list(spec.paths, strict=policy.strict,
                                 skip_report=policy.skip_report,
                                 cache_dir=None if cache is True else cache)
        # the cache is a manifest: metadata only for training (a fraction of the memory)
        return readers.in_memory(list(probed.cuts(policy.strict, policy.skip_report,
                                                  metadata_only=readers.light)))


KIND = RawKind()
