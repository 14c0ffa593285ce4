"""``text``: sentences or text pairs for text-only batches
(:mod:`wenet_lhotse.sources.text`), named in the yaml (``type: text``), never detected.

A text source has no cuts: the loader reads it with
:func:`~wenet_lhotse.sources.text.read_text_source` and mixes it by batch
(:mod:`wenet_lhotse.loader.mixed`).
"""

from __future__ import annotations

from typing import Any

from wenet_lhotse.sources.kinds.base import InputKind


class TextKind(InputKind):
    name = "text"
    description = "text-only source (sentences or src/tgt pairs, one a line)"
    detected = False
    text_only = True

    def check_spec(self, spec: Any) -> None:
        super().check_spec(spec)
        if not spec.transcripts:
            raise ValueError(f"source {spec.path!r}: a text source has no speech: "
                             "'transcripts' applies to speech sources")


KIND = TextKind()
