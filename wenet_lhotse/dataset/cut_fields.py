"""Per-cut metadata the WeNet batch needs (language, task, speaker, length in 10 ms
frames), read from Lhotse cuts without touching audio. The transcript is
:func:`wenet_lhotse.formats.layout.cut_text` (``single=True``)."""

from __future__ import annotations

from typing import Any, Optional

from lhotse.cut import Cut

#: Tag keys the loader's mixing writes into ``cut.custom``.
LANG_TAG = "lang"
TASK_TAG = "task"


def _custom(cut: Cut) -> dict:
    return getattr(cut, "custom", None) or {}


def _as_str(value: Any) -> Optional[str]:
    """Tag values may arrive as bytes (extra members of WeNet shards); empty -> None."""
    if isinstance(value, bytes):
        value = value.decode("utf-8").strip()
    return str(value) if value else None


def cut_lang(cut: Cut, default: str) -> str:
    """Language for ``batch['langs']``: the loader's source tag ``cut.custom['lang']``,
    else the supervision's ``language``, else ``default``."""
    tag = _as_str(_custom(cut).get(LANG_TAG))
    if tag:
        return tag
    if cut.supervisions and cut.supervisions[0].language:
        return str(cut.supervisions[0].language)
    return default


def cut_task(cut: Cut, default: str) -> str:
    """Task for ``batch['tasks']``: ``cut.custom['task']``, else ``default``."""
    return _as_str(_custom(cut).get(TASK_TAG)) or default


def cut_speaker(cut: Cut) -> Optional[str]:
    """The supervision's speaker, else ``cut.custom['speaker']``, else ``None``."""
    if cut.supervisions and cut.supervisions[0].speaker:
        return str(cut.supervisions[0].speaker)
    return _as_str(_custom(cut).get("speaker"))


def num_frames_10ms(cut: Cut) -> float:
    """Length in 10 ms frames as WeNet's filter counts it: ``samples / rate * 100``
    (a float, not rounded). Uses the sample count when the cut knows it, else
    ``duration * 100``. Rate-independent, so filtering before resampling agrees."""
    try:
        num_samples = cut.num_samples
        rate = cut.sampling_rate
    except Exception:  # cuts without a recording (features-only, padding)
        num_samples, rate = None, None
    if num_samples is not None and rate:
        return num_samples / rate * 100
    return cut.duration * 100
