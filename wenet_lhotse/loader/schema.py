"""Every configuration key, its type, default and check, declared once.

WeNet's ``dataset_conf`` keys (:data:`SECTIONS`, :data:`SCALARS`, WeNet's
``batch_conf`` defaults in :data:`WENET_BATCH_CONF`) and the checks of our
``lhotse_conf`` keys, which are declared on the fields of
:class:`~wenet_lhotse.loader.lhotse_conf.LhotseConf` with :func:`key` (a field whose type
annotation says enough needs no check: :func:`field_rules` derives one from it). Adding
an ``lhotse_conf`` key is one line there (plus its row in docs/migration.md).
:mod:`~wenet_lhotse.loader.config_check` reports against these declarations;
:mod:`~wenet_lhotse.loader.config` reads values with them.

A check returns ``None`` when the value is fine, else what was expected:

>>> integer(1)(0), choice("a", "b")("c"), optional(string)(None)
('expected an integer >= 1', 'expected one of a, b', None)
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Tuple, Union

from wenet_lhotse.dataset.filters import FilterConf
from wenet_lhotse.features.augmentations import AUGMENTATIONS

#: WeNet's ``batch_conf.batch_type`` values.
BATCH_TYPES = ("static", "bucket", "dynamic")

Check = Callable[[Any], Optional[str]]


def show(value: Any) -> str:
    """A config value for an error message, never echoed whole (a yaml value may be
    huge): long strings, lists and mappings are shortened."""
    if isinstance(value, str) and len(value) > 60:
        return repr(value[:57] + "...")
    if isinstance(value, (list, tuple, dict)) and len(value) > 8:
        return f"a {type(value).__name__} of {len(value)} items"
    r = repr(value)
    return r if len(r) <= 80 else r[:77] + "..."


def boolean(v: Any) -> Optional[str]:
    return None if isinstance(v, bool) else "expected a boolean"


def integer(minimum: Optional[int] = None) -> Check:
    def check(v: Any) -> Optional[str]:
        if isinstance(v, bool) or not isinstance(v, int) or (minimum is not None and v < minimum):
            return "expected an integer" + (f" >= {minimum}" if minimum is not None else "")
        return None
    return check


def number(minimum: Optional[float] = None, positive: bool = False) -> Check:
    def check(v: Any) -> Optional[str]:
        ok = isinstance(v, (int, float)) and not isinstance(v, bool)
        if ok and positive and not v > 0:
            return "expected a number > 0"
        if not ok or (minimum is not None and v < minimum):
            return "expected a number" + (f" >= {minimum:g}" if minimum is not None else "")
        return None
    return check


def string(v: Any) -> Optional[str]:
    return None if isinstance(v, str) else "expected a string"


def choice(*values: str) -> Check:
    def check(v: Any) -> Optional[str]:
        return None if v in values else "expected one of " + ", ".join(values)
    return check


def list_of(item: Check, min_len: int = 0) -> Check:
    def check(v: Any) -> Optional[str]:
        if not isinstance(v, (list, tuple)) or len(v) < min_len:
            return "expected a list" + (f" of at least {min_len}" if min_len else "")
        bad = next((x for x in v if item(x)), None)
        if bad is not None:
            return f"expected a list whose items are: {item(bad).replace('expected ', '')}"
        return None
    return check


def optional(inner: Check) -> Check:
    return lambda v: None if v is None else inner(v)


def anything(v: Any) -> Optional[str]:
    return None


#: yaml words that a user meant as a boolean, never as a directory name.
_BOOL_WORDS = {"true", "false", "yes", "no", "on", "off", "0", "1", ""}


def boolean_or_dir(v: Any) -> Optional[str]:
    """``true``/``false``, or a directory path (``probe_cache``)."""
    if isinstance(v, bool) or (isinstance(v, str) and v.strip().lower() not in _BOOL_WORDS):
        return None
    return "expected a boolean (or a cache directory)"


def mapping(v: Any) -> Optional[str]:
    return None if isinstance(v, Mapping) else "expected a mapping (key: value)"


def boolean_or_list(v: Any) -> Optional[str]:
    if isinstance(v, bool) or not list_of(number(positive=True), 1)(v):
        return None
    return "expected a boolean or a list of speed factors"


_MS = number(positive=True)
_COUNT = integer(0)
_SIZE = integer(1)

#: WeNet's ``batch_conf``: key -> (WeNet's default, check). The defaults are WeNet's
#: (``wenet/dataset/dataset.py``: static batches of 16; ``max_frames_in_batch`` 12000).
WENET_BATCH_CONF: Dict[str, Tuple[Any, Check]] = {
    "batch_type": ("static", choice(*BATCH_TYPES)),
    "batch_size": (16, _SIZE),
    "max_frames_in_batch": (12000, _SIZE),
    "bucket_boundaries": (None, list_of(_SIZE, 1)),
    "bucket_batch_sizes": (None, list_of(_SIZE, 1)),
}

#: dataset_conf sections (mappings) and their keys: WeNet's processor parameters.
SECTIONS: Dict[str, Dict[str, Check]] = {
    # the keys of the sections below are the fields of the dataclasses that hold them
    "filter_conf": {f.name: number(0) for f in dataclasses.fields(FilterConf)},
    "resample_conf": {"resample_rate": _SIZE},
    "singal_channel_conf": {"channel": _COUNT},
    "speaker_conf": {"speaker_table_path": string},
    "fbank_conf": {"num_mel_bins": _SIZE, "frame_length": _MS, "frame_shift": _MS,
                   "dither": number(0),
                   "window_type": choice("povey", "hamming", "hanning", "rectangular",
                                         "blackman")},
    "mfcc_conf": {"num_mel_bins": _SIZE, "frame_length": _MS, "frame_shift": _MS,
                  "dither": number(0), "num_ceps": _SIZE, "high_freq": number(),
                  "low_freq": number(0)},
    "log_mel_spectrogram_conf": {"n_fft": _SIZE, "hop_length": _SIZE, "num_mel_bins": _SIZE,
                                 "padding": _COUNT, "pad_or_trim": boolean,
                                 "max_duration": number(positive=True)},
    # each feature augmentation's settings, checked as its config declares them
    **{a.conf_key: {k: integer(m) for k, m in a.minimums().items()} for a in AUGMENTATIONS},
    "language_conf": {"limited_langs": list_of(string, 1)},
    "shuffle_conf": {"shuffle_size": _SIZE},
    "sort_conf": {"sort_size": _SIZE},
    "list_shuffle_conf": {"shuffle_size": _SIZE},
    "batch_conf": {k: check for k, (_, check) in WENET_BATCH_CONF.items()},
}
#: dataset_conf keys holding a plain value.
SCALARS: Dict[str, Check] = {
    "cycle": _SIZE, "list_shuffle": boolean, "speed_perturb": boolean_or_list,
    "feats_type": choice("fbank", "mfcc", "log_mel_spectrogram"),
    **{a.name: boolean for a in AUGMENTATIONS},  # each augmentation's switch
    "shuffle": boolean, "sort": boolean,
    "syncbn": boolean,  # in WeNet's librispeech squeezeformer yaml; WeNet ignores it
}

def _from_annotation(tp: Any) -> Check:
    """A check from a dataclass field's type (bool, int, float, str, List, Optional)."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is Union:
        rest = [a for a in args if a is not type(None)]
        inner = _from_annotation(rest[0]) if len(rest) == 1 else anything
        return optional(inner) if len(rest) < len(args) else inner
    if tp is bool:
        return boolean
    if tp is int:
        return integer()
    if tp is float:
        return number()
    if tp is str:
        return string
    if origin in (list, tuple, Sequence):
        return list_of(anything)
    if origin in (dict, Mapping):
        return mapping
    return anything


def torch_device(v: Any) -> Optional[str]:
    """A device name ``torch.device`` accepts (``cpu``, ``cuda:1``, ...)."""
    import torch

    try:
        torch.device(v)
    except (RuntimeError, TypeError) as err:
        return f"expected a torch device ({err})"
    return None


def key(default: Any = None, check: Optional[Check] = None) -> Any:
    """A config dataclass field with its default and, when its type annotation is not
    enough, its check (``default`` lists are copied per instance)."""
    meta = {"check": check} if check is not None else {}
    if isinstance(default, (list, dict)):
        return dataclasses.field(default_factory=lambda: type(default)(default), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def field_rules(cls: type) -> Dict[str, Check]:
    """Each field's check: the one declared with :func:`key`, else one from its type."""
    hints = typing.get_type_hints(cls)
    return {f.name: f.metadata.get("check") or _from_annotation(hints.get(f.name, Any))
            for f in dataclasses.fields(cls)}


def problem(rules: Mapping[str, Check], name: str, value: Any) -> Optional[str]:
    """``"<what was expected>, got <value>"`` when ``value`` breaks ``name``'s rule."""
    found = rules[name](value)
    return f"{found}, got {show(value)}" if found else None
