"""``WenetAsrDataset``: Lhotse cuts in, WeNet's batch dict out.

Map-style like Lhotse's ``K2SpeechRecognitionDataset``: a sampler yields a
``CutSet`` per batch and ``dataset[cuts]`` returns the dict WeNet's models consume
(the same keys, dtypes, padding and order as WeNet's ``processor.padding``):

==================  =====================================================================
``keys``            list[str], cut ids (WeNet keys), longest first
``feats``           float32 (B, T_max, F), padded with 0.0
``feats_lengths``   int32 (B,), frames
``target``          int64 (B, L_max), token ids padded with -1 (IGNORE_ID)
``target_lengths``  int32 (B,)
``langs``           list[str]: ``cut.custom['lang']`` (a source tag), else supervision
                    language (``lang_from_data``), else ``lang_id(text)`` (WeNet's
                    langid, see :mod:`.langid`), else ``lang_default``
``tasks``           list[str]: ``cut.custom['task']``, else ``task_default``
``pcm``             float32 (B, S_max) waveform in [-1, 1] padded with 0.0 (``return_pcm``)
``pcm_length``      int32 (B,), samples (``return_pcm``)
``speaker``         int32 (B,) ids from ``speaker_table`` (unknown -> 0, as WeNet's
                    ``parse_speaker``), else list[str] when any cut has a speaker
``cuts``            the cuts, in batch order (only with ``return_cuts=True``)
==================  =====================================================================

Rows are sorted by feature length, longest first; ties keep sampler order (a stable
sort; WeNet's ``argsort`` does not promise any tie order).
"""

from __future__ import annotations

import logging
import os
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import torch
from lhotse import CutSet
from lhotse.cut import Cut
from lhotse.dataset.collation import collate_vectors

from wenet_lhotse.dataset.cut_fields import cut_lang, cut_speaker, cut_task
from wenet_lhotse.dataset.langid import custom_lang
from wenet_lhotse.dataset.padding import pad_rows
from wenet_lhotse.dataset.splits import split_rules
from wenet_lhotse.errors import SkipReport, WenetDataError, carry_skips
from wenet_lhotse.formats.layout import cut_text
from wenet_lhotse.text.tokenizer import CJK_PATTERN, read_symbol_table

logger = logging.getLogger(__name__)

#: WeNet's IGNORE_ID, the padding value of ``target``.
IGNORE_ID = -1


class WenetAsrDataset(torch.utils.data.Dataset):
    """Turns a ``CutSet`` (one batch from a Lhotse sampler) into WeNet's batch dict.

    :param tokenizer: anything with WeNet's ``tokenize(line) -> (tokens, ids)``
        (our :class:`~wenet_lhotse.text.CharTokenizer` / ``BpeTokenizer`` or WeNet's own).
        May be ``None`` only with ``split="infer"`` (then no targets are produced).
    :param features: a callable ``features(cuts, augment: bool) -> (feats (B,T,F) float32
        padded 0.0, feats_lens int32 (B,), kept_cuts CutSet, audio | None)``, e.g.
        ``wenet_lhotse.features.PooledFeatures``; ``audio`` is ``(pcm (B,S), pcm_lens)``
        when it was built with ``return_audio=True``. Outputs follow ``kept_cuts``, which
        may leave out cuts whose audio failed (fault-tolerant features).
    :param split: ``"train"`` (augmentation on), ``"cv"`` (augmentation and dither off:
        ``features`` is called with ``augment=False``), ``"infer"`` (as cv, and a transcript
        is optional: cuts without one get an empty target, ``target_lengths`` 0; with no
        transcript in the batch ``target`` is ``(B, 0)``).
    :param return_pcm: add ``pcm`` / ``pcm_length`` (needs ``features`` returning audio).
    :param lang_default: ``langs`` entry when a cut has no ``lang`` tag and no supervision
        language. WeNet guesses zh/en from the text with ``langid``; ``"auto"`` approximates
        that without ``langid``: ``"zh"`` when the text has a CJK character, else ``"en"``
        (``"zh"`` without text).
    :param lang_id: ``text -> language`` for cuts without a ``lang`` tag, e.g.
        :class:`~wenet_lhotse.dataset.langid.WenetLangId` (WeNet's ``detect_language``).
    :param lang_from_data: use the supervision's ``language`` (a raw line's ``lang``)
        before ``lang_id``. WeNet does not: its langid overwrites the line's ``lang``.
    :param task_default: ``tasks`` entry when a cut has no ``task`` tag (WeNet hard-codes
        ``"transcribe"``).
    :param speaker_table: path to a ``speaker id`` table (WeNet's
        ``speaker_conf.speaker_table_path``) or a dict; makes ``speaker`` an int32 tensor.
    :param fault_tolerant: a cut without the transcript its split needs is logged,
        recorded in :attr:`skip_report` and left out, instead of raising
        :class:`~wenet_lhotse.errors.WenetDataError`.
    :param return_cuts: add the batch's cuts under ``cuts`` (for debugging and statistics).
    :param freeze_epoch: keep the features' epoch (and so every seeded draw, e.g. cv
        dither) fixed: :meth:`set_epoch` does nothing (``lhotse_conf.cv_dither: fixed``).
    """

    def __init__(
        self,
        tokenizer: Any,
        features: Any,
        split: str = "train",
        return_pcm: bool = False,
        lang_default: str = "zh",
        task_default: str = "transcribe",
        lang_id: Optional[Callable[[str], str]] = None,
        lang_from_data: bool = True,
        speaker_table: Optional[Union[str, os.PathLike, Mapping[str, int]]] = None,
        fault_tolerant: bool = False,
        return_cuts: bool = False,
        freeze_epoch: bool = False,
    ) -> None:
        super().__init__()
        self.rules = split_rules(split)
        if tokenizer is None and self.rules.needs_text:
            raise ValueError(f"split={split!r} needs a tokenizer (only 'infer' works without)")
        if tokenizer is not None and not callable(getattr(tokenizer, "tokenize", None)):
            raise TypeError("tokenizer must have WeNet's tokenize(line) -> (tokens, ids)")
        if not callable(features):
            raise TypeError("features must be callable as features(cuts, augment=...)")
        if return_pcm and getattr(features, "return_audio", None) is False:
            raise ValueError("return_pcm=True needs features built with return_audio=True")
        self.tokenizer = tokenizer
        self.features = features
        self.split = split
        self.return_pcm = return_pcm
        self.lang_default = lang_default
        self.task_default = task_default
        self.lang_id = lang_id
        self.lang_from_data = lang_from_data
        self.speaker_table = _load_speaker_table(speaker_table)
        self.fault_tolerant = fault_tolerant
        self.return_cuts = return_cuts
        self.freeze_epoch = freeze_epoch
        self.skip_report = SkipReport()

    def _lang(self, cut: Cut, text: Optional[str]) -> str:
        tag = custom_lang(cut)
        if tag:
            return tag
        if self.lang_from_data:  # tags were checked: this gives the supervision's language
            return cut_lang(cut, "") or self._lang_fallback(text)
        return self._lang_fallback(text)

    def _lang_fallback(self, text: Optional[str]) -> str:
        if self.lang_id is not None and text is not None:
            return self.lang_id(text)
        if self.lang_default != "auto":
            return self.lang_default
        return "en" if text is not None and not CJK_PATTERN.search(text) else "zh"

    @property
    def augment(self) -> bool:
        """Whether ``features`` is asked to augment (only for ``split="train"``)."""
        return self.rules.augment

    def set_epoch(self, epoch: int) -> None:
        """Forwarded to ``features.set_epoch`` when it has one (augmentation seeds),
        unless :attr:`freeze_epoch`."""
        if self.freeze_epoch:
            return
        set_epoch = getattr(self.features, "set_epoch", None)
        if callable(set_epoch):
            set_epoch(epoch)

    def close(self) -> None:
        close = getattr(self.features, "close", None)
        if callable(close):
            close()

    def _texts(self, cuts: Sequence[Cut]) -> Tuple[List[Cut], List[Optional[str]]]:
        """Validate transcripts; in fault-tolerant mode leave out the bad cuts."""
        # text_required False: a speech-only source mixed by batch (dataset.text_batch)
        required = self.rules.needs_text and getattr(self, "text_required", True)
        kept: List[Cut] = []
        texts: List[Optional[str]] = []
        for cut in cuts:
            try:
                text = cut_text(cut, single=True, required=required)
            except WenetDataError as err:
                if not self.fault_tolerant:
                    raise
                self.skip_report.add(err)
                continue
            kept.append(cut)
            texts.append(text)
        return kept, texts

    def __getitem__(self, cuts: Union[CutSet, Sequence[Cut]]) -> Dict[str, Any]:
        cut_list = list(cuts)
        cut_list, texts = self._texts(cut_list)
        tok = self.tokenizer
        token_ids: List[Optional[List[int]]] = [
            None if text is None or tok is None else list(tok.tokenize(text)[1]) for text in texts
        ]

        if cut_list:
            # features that can leave the padding to us: padded once, in batch order
            compute = getattr(self.features, "unpadded", None) or self.features
            feats, feats_lens, kept_cuts, audio = compute(
                CutSet.from_cuts(cut_list), augment=self.augment)
        else:  # every cut was skipped: an empty batch (B = 0) the loop can pass over
            feats, feats_lens, kept_cuts = torch.zeros(0, 0, 0), torch.zeros(0), []
            audio = (torch.zeros(0, 0), torch.zeros(0)) if self.return_pcm else None
        kept_idx = _match_kept(cut_list, list(kept_cuts))
        if len(kept_idx) != len(cut_list):
            logger.warning("features left out %d of %d cuts", len(cut_list) - len(kept_idx),
                           len(cut_list))
        feats_lens = torch.as_tensor(feats_lens).to(torch.int32)
        rows = len(feats) if isinstance(feats, list) else feats.shape[0]
        if rows != len(kept_idx) or feats_lens.shape[0] != len(kept_idx):
            raise RuntimeError(f"features returned {rows} rows and "
                               f"{feats_lens.shape[0]} lengths for {len(kept_idx)} kept cuts")

        # Longest first; a stable sort keeps sampler order among equal lengths.
        order = torch.sort(feats_lens, descending=True, stable=True).indices
        src = [kept_idx[i] for i in order.tolist()]  # row -> index into cut_list
        batch_cuts = [cut_list[i] for i in src]
        feats_lengths = feats_lens[order]
        t_max = int(feats_lengths.max()) if len(src) else 0
        batch: Dict[str, Any] = {"keys": [c.id for c in batch_cuts]}
        waves = getattr(feats, "batch_entries", None)
        if callable(waves):  # features_on: device -- waveforms now, features in training
            batch.update(waves(order.tolist()))
        elif isinstance(feats, list):  # unpadded rows
            dim = getattr(self.features, "feature_dim", lambda: 0)
            batch["feats"] = pad_rows(feats, order.tolist(), trailing=(dim(),)).to(torch.float32)
        else:
            batch["feats"] = feats[order][:, :t_max].to(torch.float32)
        batch["feats_lengths"] = feats_lengths
        if self.tokenizer is not None:
            targets = [torch.tensor(token_ids[i] or [], dtype=torch.int64) for i in src]
            batch["target"] = (collate_vectors(targets, padding_value=IGNORE_ID) if targets
                               else torch.empty(0, 0, dtype=torch.int64))
            batch["target_lengths"] = torch.tensor([len(t) for t in targets], dtype=torch.int32)
        else:  # infer without a tokenizer: empty targets keep the batch shape uniform
            batch["target"] = torch.empty(len(src), 0, dtype=torch.int64)
            batch["target_lengths"] = torch.zeros(len(src), dtype=torch.int32)
        batch["langs"] = [self._lang(c, texts[i]) for c, i in zip(batch_cuts, src)]
        batch["tasks"] = [cut_task(c, self.task_default) for c in batch_cuts]

        if self.return_pcm and not callable(waves):  # (device mode: added in training)
            if audio is None:
                raise ValueError("return_pcm=True but features returned no audio: "
                                 "build them with return_audio=True")
            if isinstance(audio, list):  # unpadded rows
                batch["pcm"] = pad_rows(audio, order.tolist()).to(torch.float32)
                batch["pcm_length"] = torch.tensor([audio[i].shape[0] for i in order.tolist()],
                                                   dtype=torch.int32)
            else:
                pcm, pcm_lens = audio
                pcm_lens = torch.as_tensor(pcm_lens).to(torch.int32)[order]
                s_max = int(pcm_lens.max()) if len(src) else 0
                batch["pcm"] = torch.as_tensor(pcm)[order][:, :s_max].to(torch.float32)
                batch["pcm_length"] = pcm_lens

        speakers = [cut_speaker(c) for c in batch_cuts]
        if self.speaker_table is not None:
            batch["speaker"] = torch.tensor(
                [self.speaker_table.get(s, 0) if s is not None else 0 for s in speakers],
                dtype=torch.int32)
        elif any(s is not None for s in speakers):
            batch["speaker"] = [s if s is not None else "" for s in speakers]
        if self.return_cuts:
            batch["cuts"] = CutSet.from_cuts(batch_cuts)
        skipped = self.skip_report.take_new()
        features_report = getattr(self.features, "skip_report", None)
        if features_report is not None and features_report is not self.skip_report:
            skipped += features_report.take_new()
        return carry_skips(batch, skipped)  # to the main process; our loader takes them


def _match_kept(inputs: Sequence[Cut], kept: Sequence[Cut]) -> List[int]:
    """Index in ``inputs`` of each cut in ``kept`` (a subsequence of ``inputs``).

    Matched in order, so duplicate ids in one batch are fine; a kept id may carry a
    suffix Lhotse adds to transformed cuts (``<id>_sp0.9``), the key stays the original id.
    """
    out: List[int] = []
    j = 0
    for k in kept:
        found = next((i for i in range(j, len(inputs)) if inputs[i].id == k.id), None)
        if found is None:
            found = next((i for i in range(j, len(inputs))
                          if k.id.startswith(inputs[i].id + "_")), None)
        if found is None:
            raise RuntimeError(f"features returned cut {k.id!r}, which is not in the batch "
                               "(or is out of order)")
        out.append(found)
        j = found + 1
    return out


def _load_speaker_table(table: Optional[Union[str, os.PathLike, Mapping[str, int]]]
                        ) -> Optional[Dict[str, int]]:
    if table is None:
        return None
    if isinstance(table, Mapping):
        return {str(k): int(v) for k, v in table.items()}
    return read_symbol_table(table)
