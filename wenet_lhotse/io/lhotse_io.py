"""Lhotse's IO for object-storage and HTTP URLs: :func:`install_lhotse_io_backend`
registers :mod:`wenet_lhotse.io.remote`'s retrying reader and atomic writer as a
Lhotse IO backend, so Lhotse's own readers and writers (``CutSet.from_file``, Shar
tars and manifests, ``SharWriter``, ``AudioSource(type="url")``) take ``s3://`` and
other fsspec URLs; ``http(s)://`` URLs are read (not written) through
:class:`~wenet_lhotse.io.http_reader.HttpReader`. Lhotse would need
``smart_open`` for them and has no resume-at-offset nor time limits.
Importing :mod:`wenet_lhotse.formats` (any of its modules) installs it.
"""

from __future__ import annotations

import io
from typing import BinaryIO

from wenet_lhotse.io.access import lent_url_protocols
from wenet_lhotse.io.policy import ReadPolicy
from wenet_lhotse.io.remote import _filesystem, open_remote
from wenet_lhotse.io.remote_audio import is_audio_url, is_http, open_audio_url
from wenet_lhotse.io.resumable import remote_error


def _open_for_lhotse(url: str, mode: str):
    """What Lhotse's ``open_best`` gets for a URL: text/binary, gzip by suffix."""
    gz = url.endswith(".gz")
    if "r" in mode:
        if is_http(url):
            raw: BinaryIO = io.BufferedReader(open_audio_url(url), buffer_size=1 << 16)
        else:  # protocols the reader's policy allowed (io.access.lend_url_protocols)
            raw = open_remote(url, policy=ReadPolicy(url_protocols=lent_url_protocols()))
        if gz:
            import gzip

            raw = gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[assignment]
        return raw if "b" in mode else io.TextIOWrapper(raw, encoding="utf-8")
    if "w" not in mode or is_http(url):
        raise ValueError(f"{url}: mode {mode!r} is not supported for this URL")
    from fsspec.core import OpenFile

    fs, path = _filesystem(url)
    try:  # closing the returned file closes the chain (gzip, then the upload)
        return OpenFile(fs, path, mode if "b" in mode else mode.replace("t", "") + "t",
                        compression="gzip" if gz else None, encoding="utf-8").open()
    except Exception as err:
        raise remote_error(err, url) from None


_INSTALLED = False


def install_lhotse_io_backend() -> None:
    """Make Lhotse open fsspec URLs (``s3://``, ...) with :func:`open_remote` for
    reading and fsspec for writing. Idempotent; keeps a backend the user chose
    (``LHOTSE_IO_BACKEND`` or ``set_current_io_backend``) for everything else."""
    global _INSTALLED
    if _INSTALLED:
        return
    from lhotse import serialization as ser

    class FsspecIOBackend(ser.IOBackend):
        """Object-storage (fsspec) and HTTP URLs through wenet_lhotse.formats."""

        def open(self, identifier, mode: str):
            return _open_for_lhotse(str(identifier), mode)

        def handles_special_case(self, identifier) -> bool:
            return is_audio_url(str(identifier))

        def is_applicable(self, identifier) -> bool:
            return self.handles_special_case(identifier)

    current = ser.get_current_io_backend()
    ser.set_current_io_backend(ser.CompositeIOBackend([FsspecIOBackend(), current]))
    _INSTALLED = True
