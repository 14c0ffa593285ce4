"""A small CTC acoustic model in plain torch, sized to train on a CPU in minutes.

It consumes WeNet's batch dict (``feats``, ``feats_lengths``, ``target``,
``target_lengths``) exactly as a WeNet model does, so the demo exercises the
same contract as WeNet's ``train.py``.
"""

from __future__ import annotations

from typing import Dict, List, Tuple

import torch
from torch import nn


class ConvSubsampling(nn.Module):
    """Two stride-2 convolutions over (time, freq): 4x fewer frames (WeNet's Conv2dSubsampling4)."""

    def __init__(self, num_mel_bins: int, channels: int, out_dim: int) -> None:
        super().__init__()
        self.conv = nn.Sequential(
            nn.Conv2d(1, channels, 3, stride=2), nn.ReLU(),
            nn.Conv2d(channels, channels, 3, stride=2), nn.ReLU(),
        )
        freq = ((num_mel_bins - 1) // 2 - 1) // 2
        self.out = nn.Linear(channels * freq, out_dim)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        x = self.conv(x.unsqueeze(1))  # (B, C, T', F')
        b, c, t, f = x.shape
        x = self.out(x.transpose(1, 2).reshape(b, t, c * f))
        lengths = ((lengths - 1) // 2 - 1) // 2
        return x, lengths.clamp(min=1, max=t)


def utterance_cmvn(feats: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Mean/variance-normalise each utterance over its real frames (padding stays 0).

    WeNet recipes normalise with global CMVN stats computed in a data-prep stage; a
    per-utterance version needs no such stage and keeps the demo self-contained."""
    mask = (torch.arange(feats.size(1))[None, :] < lengths[:, None]).unsqueeze(-1)
    n = lengths.clamp(min=1).view(-1, 1, 1).to(feats.dtype)
    mean = (feats * mask).sum(1, keepdim=True) / n
    var = (((feats - mean) * mask) ** 2).sum(1, keepdim=True) / n
    return (feats - mean) / (var + 1e-5).sqrt() * mask


class TinyCtcModel(nn.Module):
    """Conv subsampling + bidirectional GRU + linear CTC head (blank id 0)."""

    def __init__(self, vocab_size: int, num_mel_bins: int = 80, hidden: int = 128,
                 num_layers: int = 2) -> None:
        super().__init__()
        self.subsampling = ConvSubsampling(num_mel_bins, 32, hidden)
        self.encoder = nn.GRU(hidden, hidden, num_layers=num_layers, batch_first=True,
                              bidirectional=True)
        self.head = nn.Linear(2 * hidden, vocab_size)
        self.ctc = nn.CTCLoss(blank=0, reduction="sum", zero_infinity=True)

    def forward(self, batch: Dict) -> Dict[str, torch.Tensor]:
        """Returns ``loss`` (sum over utterances / batch size, as WeNet reports it),
        ``loss_sum`` and ``num_utts``."""
        feats, lengths = batch["feats"], batch["feats_lengths"].long()
        x, out_lens = self.subsampling(utterance_cmvn(feats, lengths), lengths)
        x, _ = self.encoder(x)
        log_probs = self.head(x).log_softmax(-1)
        target, target_lens = batch["target"], batch["target_lengths"].long()
        # CTCLoss ignores padding beyond target_lengths; -1 padding must not reach it as an index.
        loss_sum = self.ctc(log_probs.transpose(0, 1), target.clamp(min=0), out_lens, target_lens)
        n = feats.size(0)
        return {"loss": loss_sum / n, "loss_sum": loss_sum.detach(), "num_utts": torch.tensor(n)}

    @torch.no_grad()
    def greedy_decode(self, batch: Dict) -> List[List[int]]:
        lengths = batch["feats_lengths"].long()
        x, out_lens = self.subsampling(utterance_cmvn(batch["feats"], lengths), lengths)
        x, _ = self.encoder(x)
        best = self.head(x).argmax(-1)
        hyps = []
        for seq, n in zip(best.tolist(), out_lens.tolist()):
            hyp, prev = [], 0
            for t in seq[:n]:
                if t != prev and t != 0:
                    hyp.append(t)
                prev = t
            hyps.append(hyp)
        return hyps
