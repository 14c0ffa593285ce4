"""Audio files at URLs named by a raw list's ``wav``: ``s3://`` (any fsspec URL, not
in WeNet) and ``http(s)://``. Header probes and whole-file reads go through the
retrying readers (:class:`~wenet_lhotse.io.remote.RetryingReader` for fsspec,
:class:`~wenet_lhotse.io.http_reader.HttpReader` for HTTP): transient failures
retried, reading resumed at the offset reached, within the time limits of
:class:`~wenet_lhotse.io.read_limits.ReadLimits` (stall, whole-request deadline).

* :func:`probe_remote_audio` reads the header through a seekable reader in small
  range requests (about 24 KiB for a WAV or FLAC file, measured in
  ``tests/test_raw_list_s3.py`` and ``tests/test_raw_list_http.py``), not the file.
  An HTTP server that ignores range requests sends the whole file, which is then
  probed in memory; so are formats libsndfile does not read (mp3, m4a, ...), by Lhotse.
* The recording points at the URL (``AudioSource(type="url")``); Lhotse loads such
  sources through the IO backend of :mod:`wenet_lhotse.io.lhotse_io`, and
  :func:`~wenet_lhotse.formats.audio.load_samples` through :func:`read_remote_bytes`.

Failures are :class:`~wenet_lhotse.errors.WenetDataError` naming the URL (kind
``"missing_file"`` for a missing object or HTTP 404/410, ``"timeout"`` for a time
limit, ``"io"`` once the retries are spent); the raw-list reader adds the list file
and line.
"""

from __future__ import annotations

import io
from typing import Any, Optional

from lhotse import AudioSource, Recording

from wenet_lhotse.io.policy import ReadPolicy
from wenet_lhotse.io.remote import RetryingReader, is_remote
from wenet_lhotse.io.resumable import ResumableReader

#: Bytes a header probe requests per range (fsspec's read-ahead block; one HTTP
#: range request), and the buffer (bytes) libsndfile's small reads are served from.
PROBE_BLOCK = 16 << 10
_PROBE_BUFFER = 8 << 10


def is_http(name: str) -> bool:
    """True for ``http://`` and ``https://`` URLs."""
    return str(name).startswith(("http://", "https://"))


def is_audio_url(name: str) -> bool:
    """True for what :func:`read_remote_bytes` reads: fsspec and ``http(s)://`` URLs."""
    return is_http(name) or is_remote(name)


def open_audio_url(url: str, block_size=None,
                   policy: Optional[ReadPolicy] = None) -> ResumableReader:
    """The raw retrying reader of ``url`` (limits and extra URL protocols from
    ``policy``, default from the environment); seekable with ``block_size`` (bytes per
    range request)."""
    policy = policy if policy is not None else ReadPolicy()
    if is_http(url):
        from wenet_lhotse.io.http_reader import HttpReader

        return HttpReader(url, policy.read_limits(), block_size=block_size)
    return RetryingReader(url, block_size=block_size, policy=policy)


def read_remote_bytes(url: str, policy: Optional[ReadPolicy] = None) -> bytes:
    """The whole object (retried, resumed at the offset reached)."""
    with io.BufferedReader(open_audio_url(url, policy=policy), buffer_size=1 << 16) as f:
        return f.read()


class _Captured(io.RawIOBase):
    """Keeps the error of a failed read or seek and reports an end of file instead:
    libsndfile calls these from a C callback, where an exception would only be printed."""

    def __init__(self, inner: ResumableReader) -> None:
        super().__init__()
        self.inner = inner
        self.error = None

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.inner.tell()

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        try:
            return self.inner.seek(offset, whence)
        except Exception as err:
            self.error = self.error or err
            return self.inner.tell()

    def readinto(self, b) -> int:
        try:
            return self.inner.readinto(b)
        except Exception as err:
            self.error = self.error or err
            return 0


def probe_remote_audio(url: str, recording_id: str,
                       policy: Optional[ReadPolicy] = None) -> Recording:
    """The recording of the audio object ``url`` from its header (see the module doc):
    duration in seconds, sampling rate in Hz, channels; its source is the URL. Read
    within ``policy``'s limits and URL protocols (default: from the environment)."""
    import soundfile as sf

    reader = open_audio_url(url, block_size=PROBE_BLOCK, policy=policy)
    info = data = None
    try:
        if not reader.seekable():  # a server without range support: the whole file
            with io.BufferedReader(reader, buffer_size=1 << 16) as f:
                data = f.read()
        else:
            captured = _Captured(reader)
            with io.BufferedReader(captured, buffer_size=_PROBE_BUFFER) as f:
                try:
                    info = sf.info(f)
                except (sf.LibsndfileError, RuntimeError, TypeError):
                    if captured.error is not None:
                        raise captured.error from None
    finally:
        reader.close()
    if info is None and data is not None:
        try:
            info = sf.info(io.BytesIO(data))
        except (sf.LibsndfileError, RuntimeError, TypeError):
            pass
    if info is None:  # not for libsndfile: Lhotse's backends, on the whole file
        rec = Recording.from_bytes(data if data is not None else read_remote_bytes(url, policy),
                                   recording_id=recording_id)
        channels, rate, frames = rec.num_channels, rec.sampling_rate, rec.num_samples
    else:
        channels, rate, frames = info.channels, int(info.samplerate), int(info.frames)
    return header_recording(recording_id, "url", url, channels, rate, frames)


def header_recording(recording_id: str, source_type: str, source: Any, channels: int,
                     rate: int, frames: int) -> Recording:
    """The one-source :class:`~lhotse.Recording` of an audio header: ``channels``,
    ``rate`` (Hz) and ``frames`` (samples per channel); ``source_type`` is Lhotse's
    ``AudioSource.type`` (``"file"``, ``"url"``, ``"memory"``) and ``source`` its path,
    URL or bytes. What ``Recording.from_file``/``from_bytes`` build, without their
    backend probing."""
    return Recording(
        id=recording_id,
        sources=[AudioSource(type=source_type, channels=list(range(channels)),
                             source=source)],
        sampling_rate=int(rate),
        num_samples=int(frames),
        duration=int(frames) / int(rate),
    )
