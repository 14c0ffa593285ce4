"""Rebuild ``stubs/torchaudio``'s verbatim parts from a torchaudio wheel.

    pip download --no-deps torchaudio==2.11.0 -d /tmp/ta
    python wenet_harness/tools/extract_torchaudio.py /tmp/ta/torchaudio-2.11.0-*.whl

Writes ``compliance/kaldi.py`` (the whole file, unchanged) and ``functional.py`` /
``transforms.py`` (whole functions / classes copied line for line: ``create_dct`` and
the sinc resampler). Each file starts with torchaudio's BSD-2-Clause licence.
"""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

STUB = Path(__file__).resolve().parents[1] / "stubs" / "torchaudio"
VERSION = "2.11.0"


def _block(src: str, start: str) -> str:
    """The top-level def/class beginning with ``start``, through its last line."""
    lines = src.splitlines()
    i = next(n for n, line in enumerate(lines) if line.startswith(start))
    while i > 0 and lines[i - 1].startswith("@"):
        i -= 1
    j = i + 1
    while j < len(lines) and not (lines[j] and not lines[j][0].isspace()
                                  and not lines[j].startswith(")")):
        j += 1
    while not lines[j - 1].strip():
        j -= 1
    return "\n".join(lines[i:j]) + "\n"


def main(wheel: str) -> None:
    with zipfile.ZipFile(wheel) as z:
        lic = z.read(f"torchaudio-{VERSION}.dist-info/licenses/LICENSE").decode()
        kaldi = z.read("torchaudio/compliance/kaldi.py").decode()
        func = z.read("torchaudio/functional/functional.py").decode()
        trans = z.read("torchaudio/transforms/_transforms.py").decode()
    header = "".join(f"# {line}".rstrip() + "\n" for line in lic.strip().splitlines())

    def write(rel: str, note: str, body: str) -> None:
        path = STUB / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"# {note}\n# from torchaudio {VERSION} (pytorch/audio), under its "
                        f"licence:\n#\n{header}\n{body}", encoding="utf-8")

    write("compliance/kaldi.py", "torchaudio/compliance/kaldi.py, unchanged.", kaldi)
    write("functional.py",
          "Functions copied unchanged from torchaudio/functional/functional.py.",
          "import math\nimport warnings\nfrom typing import Optional\n\nimport torch\n"
          "from torch import Tensor\n\n\n"
          + "\n\n".join(_block(func, s) for s in (
              "def create_dct(", "_CPU =", "def _get_sinc_resample_kernel(",
              "def _apply_sinc_resample_kernel(", "def resample(")))
    write("transforms.py",
          "class Resample copied unchanged from torchaudio/transforms/_transforms.py.",
          "import math\nfrom typing import Optional\n\nimport torch\nfrom torch import Tensor\n\n"
          "from torchaudio.functional import _apply_sinc_resample_kernel, "
          "_get_sinc_resample_kernel\n\n\n" + _block(trans, "class Resample("))


if __name__ == "__main__":
    main(sys.argv[1])
