"""``batch['langs']`` as WeNet computes it: ``langid`` on the transcript.

WeNet's ``processor.detect_language`` runs for every utterance (``language_conf``,
default ``{limited_langs: [zh, en]}``) and *overwrites* any ``lang`` of the data line::

    lid = LanguageIdentifier.from_modelstring(model, norm_probs=True)   # once
    lid.set_languages(limited_langs)
    sample['lang'] = lid.classify(sample['txt'])[0]

:class:`WenetLangId` does exactly that. Differences, both opt-in: a ``lang`` tag of a
source (``lhotse_conf.sources[*].tags.lang``) wins over langid, and with
``lhotse_conf.lang_from_data`` the data's own language (a raw line's ``lang``, a
supervision's ``language``) does too.

Loading langid's model takes seconds, so it is loaded once per process, on first use
(DataLoader workers forked after that inherit it).
"""

from __future__ import annotations

import threading
from typing import Any, Dict, Mapping, Optional, Sequence

import numpy as np
from lhotse.cut import Cut

_LOCK = threading.Lock()
_IDENTIFIER: Dict[str, Any] = {}

#: WeNet's ``language_conf`` default
DEFAULT_LANGUAGE_CONF: Dict[str, Any] = {"limited_langs": ["zh", "en"]}


def _identifier() -> Any:
    with _LOCK:
        if "lid" not in _IDENTIFIER:
            try:
                from langid.langid import LanguageIdentifier, model
            except ImportError as e:  # pragma: no cover - langid is a dependency of the extra
                raise ImportError("WeNet's langs need langid: pip install langid") from e
            _IDENTIFIER["lid"] = LanguageIdentifier.from_modelstring(model, norm_probs=True)
        return _IDENTIFIER["lid"]


class WenetLangId:
    """``text -> language code`` with WeNet's ``detect_language``.

    :param limited_langs: languages langid may answer (WeNet's ``language_conf``);
        ``None`` for all of langid's.
    """

    def __init__(self, limited_langs: Optional[Sequence[str]] = ("zh", "en")) -> None:
        self.limited_langs = list(limited_langs) if limited_langs is not None else None

    @classmethod
    def from_wenet_conf(cls, language_conf: Optional[Mapping[str, Any]]) -> WenetLangId:
        conf = dict(DEFAULT_LANGUAGE_CONF if language_conf is None else language_conf)
        unknown = set(conf) - {"limited_langs"}
        if unknown:
            raise ValueError(f"dataset_conf.language_conf: unknown key(s) {sorted(unknown)}; "
                             "WeNet's detect_language takes limited_langs")
        return cls(conf.get("limited_langs"))

    def preload(self) -> WenetLangId:
        """Load the model now (before DataLoader workers fork)."""
        _identifier()
        return self

    def __call__(self, text: str) -> str:
        lid = _identifier()
        with _LOCK:  # set_languages mutates the shared identifier, as in WeNet
            # WeNet calls it for every utterance; the same languages again change nothing
            # (it rebuilds the model's language columns: a third of a call's time)
            langs = None if self.limited_langs is None else tuple(self.limited_langs)
            if _IDENTIFIER.get("langs") != langs:
                lid.set_languages(self.limited_langs)
                _IDENTIFIER["langs"] = langs
            return _classify(lid, text)


#: Least gap (natural log) between the best class's log-probability and any other's for
#: which :func:`_classify` answers without normalizing (far above float64 rounding).
_CLEAR_GAP = 1e-6


def _classify(lid: Any, text: str) -> str:
    """``lid.classify(text)[0]`` without the normalization, when the answer is clear.
    langid normalizes the log-probabilities ``pd`` to ``p_k = 1 / sum_j exp(pd_j - pd_k)``,
    so ``p_k = p_best * exp(pd_k - pd_best)``: the class with the largest ``pd`` has the
    largest ``p``, strictly when every other ``pd`` is lower by more than rounding.
    A closer call (or a tie, where ``argmax`` takes the first) goes through
    ``classify`` itself."""
    pd = lid.nb_classprobs(lid.instance2fv(text))
    best = int(np.argmax(pd))
    if len(pd) == 1:
        return str(lid.nb_classes[best])
    gap = pd[best] - np.partition(pd, -2)[-2]
    if gap > _CLEAR_GAP:
        return str(lid.nb_classes[best])
    return str(lid.classify(text)[0])


def custom_lang(cut: Cut) -> Optional[str]:
    """A ``lang`` tag in ``cut.custom`` (our sources' tags), else None."""
    value = (getattr(cut, "custom", None) or {}).get("lang")
    if isinstance(value, bytes):
        value = value.decode("utf-8").strip()
    return str(value) if value else None
