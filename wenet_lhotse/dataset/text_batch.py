"""Batches of one kind each, for mixed speech / text training.

:class:`KindDataset` is the ``dataset[items] -> batch`` of a loader that mixes by batch
(:class:`~wenet_lhotse.loader.batch_mux.BatchMuxSampler`): every batch comes from one
source, and its ``kind`` says what it holds:

==============  ===========================================================================
``asr``         speech with transcripts: WeNet's batch dict (``keys``, ``feats``,
                ``feats_lengths``, ``target``, ``target_lengths``, ``langs``, ``tasks``...)
                exactly as :class:`~.asr.WenetAsrDataset` gives it, plus ``kind``
``speech``      speech without transcripts (``transcripts: false`` sources): the same dict,
                ``target`` empty ``(B, 0)`` and ``target_lengths`` zeros
``text``        ``keys``, ``target`` int64 ``(B, L_max)`` padded with -1 (IGNORE_ID),
                ``target_lengths`` int32, ``langs``, ``tasks``; no features
``text_pair``   as ``text`` plus ``source`` / ``source_lengths`` (the ``src`` side)
==============  ===========================================================================

Text rows are sorted longest target first (as WeNet sorts speech rows by frames). Token ids
are those the WeNet tokenizer gave when the source was read (no ``<sos>``/``<eos>``: the
model adds them, as WeNet's models do for speech targets).
"""

from __future__ import annotations

import copy
from typing import Any, Dict, List, Sequence

import torch
from lhotse import CutSet
from lhotse.cut.text import TextExample, TextPairExample
from lhotse.dataset.collation import collate_vectors

from wenet_lhotse.errors import carry_skips

IGNORE_ID = -1
KINDS = ("asr", "speech", "text", "text_pair")


def _pad(rows: Sequence[Any]) -> torch.Tensor:
    tensors = [torch.as_tensor(r, dtype=torch.int64) for r in rows]
    if not tensors:
        return torch.empty(0, 0, dtype=torch.int64)
    return collate_vectors(tensors, padding_value=IGNORE_ID)


def text_batch(items: Sequence[Any], task_default: str = "lm",
               lang_default: str = "zh") -> Dict[str, Any]:
    """A ``text`` or ``text_pair`` batch from ``TextExample`` / ``TextPairExample`` s."""
    pair = isinstance(items[0], TextPairExample)
    if any(isinstance(i, TextPairExample) != pair for i in items):
        raise ValueError("a text batch mixes text items and text pairs")
    tgt = [i.target.tokens if pair else i.tokens for i in items]
    order = sorted(range(len(items)), key=lambda k: -len(tgt[k]))
    custom = [items[k].custom or {} for k in order]
    batch: Dict[str, Any] = {
        "kind": "text_pair" if pair else "text",
        "keys": [str(c.get("id", "")) for c in custom],
        "target": _pad([tgt[k] for k in order]),
        "target_lengths": torch.tensor([len(tgt[k]) for k in order], dtype=torch.int32),
        "langs": [str(c.get("lang", lang_default)) for c in custom],
        "tasks": [str(c.get("task", task_default)) for c in custom],
    }
    if pair:
        src = [items[k].source.tokens for k in order]
        batch["source"] = _pad(src)
        batch["source_lengths"] = torch.tensor([len(s) for s in src], dtype=torch.int32)
    return batch


class KindDataset(torch.utils.data.Dataset):
    """Dispatches each batch by what it holds (see the module docstring).

    :param speech: the speech dataset (``dataset[cuts] -> WeNet dict``, e.g.
        :class:`~.asr.WenetAsrDataset`).
    :param attach: optional ``cuts -> cuts`` run before ``speech`` (Shar audio).
    :param task_default: ``tasks`` entry of text items without a ``task`` tag.
    """

    def __init__(self, speech: Any, attach: Any = None, task_default: str = "lm") -> None:
        self.speech = speech
        self.attach = attach
        self.task_default = task_default
        self._unlabelled: Any = None

    def set_epoch(self, epoch: int) -> None:
        if hasattr(self.speech, "set_epoch"):
            self.speech.set_epoch(epoch)
        if self._unlabelled is not None and hasattr(self._unlabelled, "set_epoch"):
            self._unlabelled.set_epoch(epoch)

    def unlabelled(self) -> Any:
        """The speech dataset without targets: a shallow copy without tokenizer whose cuts
        need no transcript (augmentation as configured)."""
        if self._unlabelled is None:
            ds = copy.copy(self.speech)
            if hasattr(ds, "tokenizer"):
                ds.tokenizer = None
            ds.text_required = False
            self._unlabelled = ds
        return self._unlabelled

    def __getitem__(self, items: Any) -> Dict[str, Any]:
        items = list(items)
        if items and isinstance(items[0], (TextExample, TextPairExample)):
            return text_batch(items, self.task_default)
        kinds = {(c.custom or {}).get("kind", "asr") for c in items}
        if len(kinds) > 1:
            raise ValueError(f"a batch mixes kinds {sorted(kinds)}: mixing by batch expected")
        kind = kinds.pop() if kinds else "asr"
        skipped: List[Any] = []
        if self.attach is not None:
            items = list(self.attach(CutSet.from_cuts(items)))
            skipped = self.attach.skip_report.take_new()
        ds = self.unlabelled() if kind == "speech" else self.speech
        out = ds[items]
        if isinstance(out, dict):
            out["kind"] = kind
        return carry_skips(out, skipped)
