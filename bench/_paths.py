"""Makes the repository's top-level ``wenet_harness`` importable from a bench script.

``python bench/x.py`` puts only ``bench/`` on ``sys.path``; importing this module
(``import _paths``, first among a script's imports) appends the repository root, so
that the script imports the WeNet harness (WeNet's own code at ``$WENET_ROOT`` next to
ours, shared with the tests, not part of the wheel) as the tests do -- pytest's
``pythonpath`` option puts the same root on the path. Appended, not prepended: which
``wenet_lhotse`` is imported does not change (``PYTHONPATH`` decides, as before).
"""

from __future__ import annotations

import sys
from pathlib import Path

#: the repository root (holds ``wenet_lhotse/``, ``wenet_harness/``, ``bench/``, ``tests/``)
REPO = Path(__file__).resolve().parents[1]

if str(REPO) not in sys.path:
    sys.path.append(str(REPO))
