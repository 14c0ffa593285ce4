"""Train the demo's CTC model plus a small text decoder on a mix of speech batches and
text-only batches (wenet-lhotse's mixing by batch, docs/mixing.md).

    python recipes/speech_text/train.py --data DIR --epochs 2

DIR holds data.list, units.txt (``wenet-lhotse corpus``) and lm.txt (sentences). Each
step is one kind of batch: ``asr`` (speech + transcript) trains the CTC encoder and the
decoder conditioned on the pooled encoder output; ``text`` trains the decoder alone as a
language model (no acoustic context). Prints per-task loss and each source's share of the
epoch's batches.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from pathlib import Path

import torch
from torch import nn

from wenet_lhotse import CharTokenizer, build_dataloader
from wenet_lhotse.demo.model import TinyCtcModel, utterance_cmvn
from wenet_lhotse.loader.mixed import source_shares


class TextDecoder(nn.Module):
    """A GRU language model over token ids, optionally conditioned on a context vector
    (the pooled acoustic encoder output for speech batches, zeros for text batches)."""

    def __init__(self, vocab_size: int, hidden: int, context: int) -> None:
        super().__init__()
        self.vocab_size = vocab_size
        self.embed = nn.Embedding(vocab_size + 1, hidden)  # + <sos> = vocab_size
        self.ctx = nn.Linear(context, hidden)
        self.rnn = nn.GRU(hidden, hidden, batch_first=True)
        self.out = nn.Linear(hidden, vocab_size)

    def forward(self, target: torch.Tensor, lengths: torch.Tensor,
                context: torch.Tensor) -> torch.Tensor:
        """Mean next-token cross entropy (padding -1 ignored)."""
        b = target.size(0)
        sos = torch.full((b, 1), self.vocab_size, dtype=torch.long)
        inputs = torch.cat([sos, target.clamp(min=0)[:, :-1]], dim=1)
        h0 = torch.tanh(self.ctx(context)).unsqueeze(0)
        y, _ = self.rnn(self.embed(inputs), h0)
        return nn.functional.cross_entropy(self.out(y).transpose(1, 2), target,
                                           ignore_index=-1)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--data", required=True)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--out", default=None, help="write per-epoch stats (json) here")
    args = p.parse_args()
    data = Path(args.data)
    torch.manual_seed(0)
    tok = CharTokenizer(data / "units.txt")
    conf = {"batch_conf": {"batch_type": "static", "batch_size": 8},
            "fbank_conf": {"num_mel_bins": 40, "frame_length": 25, "frame_shift": 10,
                           "dither": 0.0},
            "spec_aug": False,
            "lhotse_conf": {"num_buckets": 2, "max_tokens_in_batch": 512}}
    sources = [{"path": str(data / "data.list"), "type": "raw", "weight": 1,
                "name": "speech", "tags": {"task": "asr"}},
               {"path": str(data / "lm.txt"), "type": "text", "weight": 1,
                "name": "text", "tags": {"task": "lm"}}]
    _, loader = build_dataloader(sources, tok, conf, "train", seed=0)
    vocab = tok.vocab_size()
    asr = TinyCtcModel(vocab, num_mel_bins=40, hidden=64, num_layers=1)
    dec = TextDecoder(vocab, hidden=64, context=128)
    opt = torch.optim.Adam(list(asr.parameters()) + list(dec.parameters()), lr=2e-3)
    history = []
    for epoch in range(args.epochs):
        t0, losses = time.time(), defaultdict(list)
        for batch in loader:
            if batch["kind"] == "asr":
                out = asr(batch)
                lengths = batch["feats_lengths"].long()
                x, n = asr.subsampling(utterance_cmvn(batch["feats"], lengths), lengths)
                enc, _ = asr.encoder(x)
                mask = (torch.arange(enc.size(1))[None] < n[:, None]).unsqueeze(-1)
                pooled = (enc * mask).sum(1) / n.clamp(min=1)[:, None]
                lm = dec(batch["target"], batch["target_lengths"], pooled)
                loss = out["loss"] / max(1, int(batch["target_lengths"].sum()) // len(
                    batch["keys"])) + lm
                losses["asr_ctc"].append(out["loss"].item())
                losses["asr_decoder"].append(lm.item())
            else:  # text: the decoder as a language model, no acoustic context
                ctx = torch.zeros(batch["target"].size(0), 128)
                loss = dec(batch["target"], batch["target_lengths"], ctx)
                losses["text_decoder"].append(loss.item())
            opt.zero_grad()
            loss.backward()
            opt.step()
        shares = source_shares(loader.sampler.sampler)
        stats = {"epoch": epoch, "seconds": round(time.time() - t0, 1),
                 "loss": {k: round(sum(v) / len(v), 4) for k, v in losses.items()},
                 "batches": {k: len(v) for k, v in losses.items() if k != "asr_decoder"},
                 "share": {k: round(v, 3) for k, v in shares.items()}}
        print(json.dumps(stats), flush=True)
        history.append(stats)
    if args.out:
        Path(args.out).write_text(json.dumps(history, indent=1))


if __name__ == "__main__":
    main()
