"""Pieces shared by the raw-list and shard readers/writers: the WeNet item
layout on a Lhotse cut, duplicate-key detection, 16-bit PCM WAV encoding."""

from __future__ import annotations

import hashlib
import io
import json
from array import array
from typing import Any, Dict, Optional, Tuple

import numpy as np

#: Audio member suffixes WeNet accepts in shards (``processor.AUDIO_FORMAT_SETS``).
AUDIO_SUFFIXES = frozenset({"flac", "mp3", "m4a", "ogg", "opus", "wav", "wma"})

#: WeNet item fields that map onto the cut itself; every other field goes to ``cut.custom``.
CORE_FIELDS = frozenset({"key", "wav", "txt", "start", "end", "speaker", "lang"})

#: Entries Lhotse itself puts into ``cut.custom`` (Shar readers, samplers): never exported.
LHOTSE_INTERNAL_CUSTOM = frozenset({"shard_origin", "shar_epoch", "dataloading_info"})


class KeySet:
    """A set of keys, for duplicate detection over lists of millions of lines.

    Keys are stored as 128-bit BLAKE2b digests in an open-addressing table of two
    ``array('Q')`` columns (16 bytes per slot, load factor at most 1/2: 32-64 bytes
    per key, against ~100+ bytes per key for a ``set`` of str). A false duplicate
    needs a 128-bit collision: about n**2 / 2**129, i.e. never in practice.
    """

    def __init__(self, capacity: int = 1024) -> None:
        cap = 1
        while cap < capacity:
            cap *= 2
        self._hi = array("Q", bytes(8 * cap))
        self._lo = array("Q", bytes(8 * cap))
        self._n = 0

    @staticmethod
    def _digest(key: str):
        d = hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=16).digest()
        hi, lo = int.from_bytes(d[:8], "little"), int.from_bytes(d[8:], "little")
        return hi, (lo or 1)  # (x, 0) marks an empty slot

    def _insert(self, hi: int, lo: int) -> bool:
        mask = len(self._hi) - 1
        i = hi & mask
        while True:
            slot_lo = self._lo[i]
            if slot_lo == 0:
                self._hi[i], self._lo[i] = hi, lo
                self._n += 1
                return True
            if slot_lo == lo and self._hi[i] == hi:
                return False
            i = (i + 1) & mask

    def add(self, key: str) -> bool:
        """Add ``key``; return False if it was already present."""
        if 2 * (self._n + 1) > len(self._hi):
            old_hi, old_lo = self._hi, self._lo  # rehash lazily: no per-key Python objects
            self._hi = array("Q", bytes(16 * len(old_hi)))
            self._lo = array("Q", bytes(16 * len(old_hi)))
            self._n = 0
            for h, low in zip(old_hi, old_lo):
                if low:
                    self._insert(h, low)
        return self._insert(*self._digest(key))

    def __contains__(self, key: str) -> bool:
        hi, lo = self._digest(key)
        mask = len(self._hi) - 1
        i = hi & mask
        while self._lo[i]:
            if self._lo[i] == lo and self._hi[i] == hi:
                return True
            i = (i + 1) & mask
        return False

    def __len__(self) -> int:
        return self._n


def audio_error_message(err: Exception, source) -> str:
    """A one-line reason why audio could not be read. Lhotse tries every backend and
    its message ends with a hint, not the cause: ask libsndfile for the cause."""
    import soundfile as sf

    try:
        sf.info(io.BytesIO(source) if isinstance(source, (bytes, bytearray)) else source)
    except Exception as e:  # libsndfile's reason, e.g. "Format not recognised."
        return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    lines = [x.strip() for x in str(err).strip().splitlines() if x.strip()]
    return lines[0] if lines else type(err).__name__


def encode_pcm16_wav(samples: np.ndarray, sampling_rate: int) -> bytes:
    """Encode float samples in [-1, 1], shape (channels, samples) or (samples,), as a
    16-bit PCM WAV file. Quantizes as ``round(x * 32768)`` clipped to int16, the exact
    inverse of how 16-bit audio is loaded (``int / 32768``), so 16-bit input round-trips
    bit-exactly (libsndfile's own float->int conversion scales by 32767)."""
    import soundfile as sf

    x = np.asarray(samples)
    if x.ndim == 2:
        x = x.T  # soundfile wants (samples, channels)
    pcm = np.clip(np.round(x.astype(np.float64) * 32768.0), -32768, 32767).astype(np.int16)
    buf = io.BytesIO()
    sf.write(buf, pcm, int(sampling_rate), format="WAV", subtype="PCM_16")
    return buf.getvalue()


def cut_text(cut) -> Optional[str]:
    """The WeNet ``txt`` of a cut: its supervisions' texts joined by a space, or None."""
    texts = [s.text for s in cut.supervisions if s.text is not None]
    return " ".join(texts) if texts else None


def cut_speaker_lang(cut):
    """``(speaker, lang)`` from the first supervision that has each, else None."""
    speaker = next((s.speaker for s in cut.supervisions if s.speaker is not None), None)
    lang = next((s.language for s in cut.supervisions if s.language is not None), None)
    return speaker, lang


def cut_extra_fields(cut) -> Dict[str, Any]:
    """The extra (non-core) WeNet fields stored in ``cut.custom``, without Lhotse's own
    bookkeeping entries and without anything that would shadow a core field."""
    custom = getattr(cut, "custom", None) or {}
    return {
        k: v
        for k, v in custom.items()
        if k not in LHOTSE_INTERNAL_CUSTOM and k not in CORE_FIELDS
    }


def json_value(cut_id: str, name: str, value: Any) -> Any:
    """Check that a custom field can be written as JSON; a clear error otherwise."""
    if isinstance(value, (bytes, bytearray)):
        raise ValueError(
            f"cut {cut_id!r}: custom field {name!r} holds bytes, which a JSON list cannot "
            f"store; drop it or decode it to str first"
        )
    try:
        json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError) as e:
        raise ValueError(f"cut {cut_id!r}: custom field {name!r} is not JSON: {e}") from e
    return value


_MAGIC = ((b"RIFF", 8, b"WAVE", "wav"), (b"fLaC", 0, b"", "flac"))


def sniff_container(data: bytes) -> Optional[str]:
    """``"wav"`` or ``"flac"`` when ``data`` starts like such a file, else None."""
    for magic, off, magic2, ext in _MAGIC:
        if data[:4] == magic and data[off:off + len(magic2)] == magic2:
            return ext
    return None


def whole_recording_bytes(cut) -> Optional[Tuple[bytes, str]]:
    """``(encoded bytes, extension)`` of the cut's audio when the cut is exactly its
    whole recording, stored in one WAV or FLAC file or in-memory blob, without
    transforms; else None. These bytes can be stored as they are."""
    rec = getattr(cut, "recording", None)
    if (rec is None or len(rec.sources) != 1 or rec.transforms
            or cut.start != 0 or cut.num_samples != rec.num_samples
            or rec.num_channels != cut.num_channels):
        return None
    src = rec.sources[0]
    if src.type == "memory":
        data = bytes(src.source)
    elif src.type == "file":
        with open(src.source, "rb") as f:
            data = f.read()
    else:
        return None
    ext = sniff_container(data[:12])
    return (data, ext) if ext else None
