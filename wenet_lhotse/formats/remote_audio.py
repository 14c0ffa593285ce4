"""Audio files at object-storage URLs (``s3://``, any fsspec URL) named by a raw
list's ``wav``: header probes and whole-file reads through
:mod:`wenet_lhotse.formats.remote` (retried, resumed at the offset reached).

* :func:`probe_remote_audio` reads the header through a seekable reader in small
  range requests (about 24 KiB for a WAV or FLAC file, measured in
  ``tests/test_raw_list_s3.py``), not the file. Formats libsndfile does not read (mp3, m4a, ...) are
  downloaded and probed by Lhotse.
* The recording points at the URL (``AudioSource(type="url")``); Lhotse loads such
  sources through the IO backend of :mod:`wenet_lhotse.formats.lhotse_io`, and
  :func:`~wenet_lhotse.formats.audio.load_samples` through :func:`read_remote_bytes`.

Failures are :class:`~wenet_lhotse.errors.WenetDataError` naming the URL (kind
``"missing_file"`` for a missing object, ``"io"`` once the retries are spent); the
raw-list reader adds the list file and line.
"""

from __future__ import annotations

import io

from lhotse import AudioSource, Recording

from wenet_lhotse.formats.remote import (
    RetryingReader,
    default_backoff,
    default_retries,
    open_remote,
)

#: Bytes a header probe requests beyond each read (fsspec's read-ahead block), and the
#: buffer (bytes) libsndfile's small reads are served from.
PROBE_BLOCK = 16 << 10
_PROBE_BUFFER = 8 << 10


def read_remote_bytes(url: str) -> bytes:
    """The whole object (retried, resumed at the offset reached)."""
    with open_remote(url) as f:
        return f.read()


class _ProbeReader(RetryingReader):
    """Keeps the error of a failed read and reports an end of file instead: libsndfile
    calls ``readinto`` from a C callback, where an exception would only be printed."""

    error = None

    def readinto(self, b) -> int:
        try:
            return super().readinto(b)
        except Exception as err:
            self.error = err
            return 0


def probe_remote_audio(url: str, recording_id: str) -> Recording:
    """The recording of the audio object ``url`` from its header (see the module doc):
    duration in seconds, sampling rate in Hz, channels; its source is the URL."""
    import soundfile as sf

    reader = _ProbeReader(url, default_retries(), default_backoff(), block_size=PROBE_BLOCK)
    with io.BufferedReader(reader, buffer_size=_PROBE_BUFFER) as f:
        try:
            info = sf.info(f)
        except (sf.LibsndfileError, RuntimeError, TypeError):
            if reader.error is not None:
                raise reader.error from None
            info = None
    if info is None:  # not for libsndfile: Lhotse's backends, on the whole file
        rec = Recording.from_bytes(read_remote_bytes(url), recording_id=recording_id)
        channels, rate, frames = rec.num_channels, rec.sampling_rate, rec.num_samples
    else:
        channels, rate, frames = info.channels, int(info.samplerate), int(info.frames)
    return Recording(
        id=recording_id,
        sources=[AudioSource(type="url", channels=list(range(channels)), source=url)],
        sampling_rate=rate,
        num_samples=frames,
        duration=frames / rate,
    )
