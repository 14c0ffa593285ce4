"""Per-epoch training statistics and their plot."""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Dict, List, Mapping, Optional

logger = logging.getLogger(__name__)

FRAME_SHIFT_S = 0.01  # WeNet features: one frame per 10 ms


@dataclass
class BatchStats:
    """Accumulates what the batches of one epoch held.

    Frames are feature frames (10 ms each); padding is counted on ``feats``.
    """

    batches: int = 0
    utterances: int = 0
    frames: int = 0  # real frames
    padded_frames: int = 0  # B * T_max summed over batches
    batch_sizes: List[int] = field(default_factory=list)

    def add(self, batch: Dict) -> None:
        lens = batch["feats_lengths"]
        self.batches += 1
        self.utterances += int(lens.numel())
        self.frames += int(lens.sum())
        self.padded_frames += int(batch["feats"].shape[0] * batch["feats"].shape[1])
        self.batch_sizes.append(int(lens.numel()))

    @property
    def audio_seconds(self) -> float:
        return self.frames * FRAME_SHIFT_S

    @property
    def padding_fraction(self) -> float:
        return 1.0 - self.frames / self.padded_frames if self.padded_frames else 0.0


@dataclass
class EpochRecord:
    epoch: int
    train_loss: float  # mean CTC loss per utterance
    cv_loss: Optional[float]
    audio_seconds: float
    wall_seconds: float
    throughput: float  # audio seconds per wall second
    padding_fraction: float
    data_wait_fraction: float
    batches: int
    mean_batch_size: float


def save_history(history: List[EpochRecord], path: Path) -> None:
    path.write_text(json.dumps([asdict(r) for r in history], indent=2), encoding="utf-8")


def plot_history(runs: Mapping[str, List[EpochRecord]], path: Path, title: str = ""
                 ) -> Optional[Path]:
    """Loss curves, throughput, padding and data-wait per epoch of one or more runs
    (``{"label": history}``) to a PNG; None (with a log line) without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        logger.warning("matplotlib is not installed (pip install matplotlib): no plot written")
        return None
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    for i, (label, history) in enumerate(runs.items()):
        c = f"C{i}"  # one colour per run; solid = train/padding, dashed = cv/data wait
        epochs = [r.epoch for r in history]
        axes[0].plot(epochs, [r.train_loss for r in history], "o-", c=c, label=f"{label}: train")
        if any(r.cv_loss is not None for r in history):
            axes[0].plot(epochs, [r.cv_loss for r in history], "s--", c=c, label=f"{label}: cv")
        axes[1].plot(epochs, [r.throughput for r in history], "o-", c=c, label=label)
        axes[2].plot(epochs, [100 * r.padding_fraction for r in history], "o-", c=c,
                     label=f"{label}: padding")
        axes[2].plot(epochs, [100 * r.data_wait_fraction for r in history], "s--", c=c,
                     label=f"{label}: data wait")
    axes[0].set(xlabel="epoch", ylabel="CTC loss / utterance", title="loss")
    axes[1].set(xlabel="epoch", ylabel="audio s / wall s (all ranks)", title="throughput")
    axes[2].set(xlabel="epoch", ylabel="% of frames / % of wall time", title="batches")
    for ax in axes:
        ax.legend(fontsize=7)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def load_history(path: Path) -> List[EpochRecord]:
    return [EpochRecord(**r) for r in json.loads(Path(path).read_text(encoding="utf-8"))]


TABLE_HEADER = "epoch  train loss  cv loss  audio s/s  padding  data wait  batches/rank"


def table_row(r: EpochRecord) -> str:
    """One line of the per-epoch table under :data:`TABLE_HEADER`."""
    cv = f"{r.cv_loss:7.2f}" if r.cv_loss is not None else "    n/a"
    return (f"{r.epoch:5d}  {r.train_loss:10.2f}  {cv}  {r.throughput:9.0f}  "
            f"{100 * r.padding_fraction:6.1f}%  {100 * r.data_wait_fraction:8.1f}%  "
            f"{r.batches:12d}")
