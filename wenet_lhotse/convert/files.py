"""File-system helpers shared by the converters."""

from __future__ import annotations

import os
from typing import Union

_UMASK = None


def apply_umask(path: Union[str, os.PathLike]) -> None:
    """Give a file written through a ``tempfile.mkstemp`` temp file (mode 0600) the
    permissions a plain ``open()`` would have given it (0666 minus the umask), so
    that manifests and audio written for a team stay readable by it."""
    global _UMASK
    if _UMASK is None:
        _UMASK = os.umask(0o022)  # os.umask can only be read by setting it
        os.umask(_UMASK)
    os.chmod(path, 0o666 & ~_UMASK)
