"""A picture of a WeNet training run (``wenet-lhotse plot EXP_DIR``): loss and cv loss,
learning rate, data wait and throughput, read from what WeNet's ``train.py`` (through
``python -m wenet_lhotse.dropin.train``) leaves behind.

Two sources, either or both:

* WeNet's tensorboard event files (``tensorboardX``'s ``SummaryWriter`` in
  ``--tensorboard_dir``, default ``tensorboard/<basename of --model_dir>`` in the
  working directory; also looked for under ``EXP_DIR``): ``train/train_loss`` and
  ``train/lr_0`` per step, ``epoch/loss`` (cv) and ``epoch/lr_0`` per epoch, ``cv/loss``
  per step in step mode. Read here without TensorFlow or tensorboard: an event file is
  a TFRecord stream (length, CRC, ``Event`` protobuf, CRC), parsed with the ``Event``
  message tensorboardX ships (extra ``wenet``);
* the run's log (``EXP_DIR/train.log`` or ``--log``: what ``train.py`` printed on
  stderr): WeNet's ``Epoch E Step S CV info ... cv_loss L`` lines (cv loss at the step
  each epoch ended), and our progress lines (:mod:`wenet_lhotse.loader.progress`: data
  wait share and utterances per second).

Drawn with matplotlib (extra ``plot``) on an Agg canvas (no display needed).
"""

from __future__ import annotations

import os
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

#: ``(x, y)`` points of one curve
Series = List[Tuple[float, float]]

PLOT_HINT = ("pip install matplotlib (or, in the wenet-lhotse clone: "
             "pip install -e \".[plot]\")")

_CV = re.compile(r"Epoch (\d+) Step (\d+) CV info lr (\S+) cv_loss (\S+) rank 0\b")
_PROGRESS = re.compile(r"epoch (\d+): batch (\d+)\S*.*?, (\d+) utts, ([\d.]+) h audio, "
                       r"data wait (\d+)% of ((?:\d+ h )?(?:\d+ min )?\d+ s|\d+ h \d+ min)")


@dataclass
class RunCurves:
    """What was read of one run: each curve a list of ``(x, y)``."""

    train_loss: Series = field(default_factory=list)  #: per step
    lr: Series = field(default_factory=list)  #: per step
    cv_loss_step: Series = field(default_factory=list)  #: at the step each cv ran
    cv_loss_epoch: Series = field(default_factory=list)  #: per epoch (tensorboard)
    data_wait: Series = field(default_factory=list)  #: (batch, % of the epoch's time)
    throughput: Series = field(default_factory=list)  #: (batch, utterances per second)
    sources: List[str] = field(default_factory=list)

    def empty(self) -> bool:
        return not (self.train_loss or self.cv_loss_step or self.cv_loss_epoch
                    or self.data_wait)


def tfrecords(path: Path) -> Iterator[bytes]:
    """The records of a TFRecord file (what tensorboard's event files are): each is
    ``uint64 length, uint32 crc, data, uint32 crc`` (little-endian). A truncated last
    record (a run still writing) ends the iteration."""
    with open(path, "rb") as f:
        while True:
            head = f.read(12)
            if len(head) < 12:
                return
            (length,) = struct.unpack("<Q", head[:8])
            data = f.read(length)
            if len(data) < length or len(f.read(4)) < 4:
                return
            yield data


def read_events(path: Path) -> Dict[str, Series]:
    """``{tag: [(step, value), ...]}`` of the scalars in one event file."""
    from tensorboardX.proto.event_pb2 import Event

    out: Dict[str, Series] = {}
    for record in tfrecords(path):
        event = Event.FromString(record)
        if not event.HasField("summary"):
            continue
        for value in event.summary.value:
            if value.HasField("simple_value"):
                out.setdefault(value.tag, []).append((float(event.step),
                                                      float(value.simple_value)))
    return out


def event_files(exp_dir: Path, tensorboard_dir: Optional[Path]) -> List[Path]:
    """Event files of the run: under ``tensorboard_dir`` when given, else under
    ``EXP_DIR`` and WeNet's default ``tensorboard/<basename of EXP_DIR>``."""
    roots = [tensorboard_dir] if tensorboard_dir else [
        exp_dir, Path("tensorboard") / exp_dir.resolve().name]
    found: List[Path] = []
    for root in roots:
        if root.is_dir():
            found += sorted(root.rglob("events.out.tfevents.*"))
    return found


def _seconds(text: str) -> float:
    units = {"h": 3600, "min": 60, "s": 1}
    parts = text.split()
    return float(sum(int(n) * units[u] for n, u in zip(parts[::2], parts[1::2])))


def read_log(path: Path, curves: RunCurves) -> None:
    """Add the cv losses and progress lines of a ``train.py`` log to ``curves``."""
    offset = 0  # batches of the epochs before (progress lines count per epoch)
    last_epoch, last_batch = -1, 0
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        m = _CV.search(line)
        if m:
            curves.cv_loss_step.append((float(m.group(2)), float(m.group(4))))
            continue
        m = _PROGRESS.search(line)
        if m:
            epoch, batch = int(m.group(1)), int(m.group(2))
            if epoch != last_epoch and last_epoch >= 0:
                offset += last_batch
            last_epoch, last_batch = epoch, batch
            elapsed = _seconds(m.group(6))
            curves.data_wait.append((offset + batch, float(m.group(5))))
            if elapsed > 0:
                curves.throughput.append((offset + batch, int(m.group(3)) / elapsed))


def read_run(exp_dir: Path, log: Optional[Path] = None,
             tensorboard_dir: Optional[Path] = None) -> RunCurves:
    """Everything :func:`plot_run` draws, from the event files and the log found."""
    curves = RunCurves()
    files = event_files(exp_dir, tensorboard_dir)
    if files:
        try:
            import tensorboardX  # noqa: F401 - its Event message parses the records
        except ImportError:
            files = []
    for path in files:
        tags = read_events(path)
        curves.train_loss += tags.get("train/train_loss", [])
        curves.lr += tags.get("train/lr_0", [])
        curves.cv_loss_epoch += tags.get("epoch/loss", [])
        curves.cv_loss_step += tags.get("cv/loss", [])
        curves.sources.append(str(path))
    log = log or (exp_dir / "train.log")
    if log.is_file():
        read_log(log, curves)
        curves.sources.append(str(log))
    for name in ("train_loss", "lr", "cv_loss_step", "cv_loss_epoch"):
        setattr(curves, name, sorted(set(getattr(curves, name))))
    return curves


def plot_run(curves: RunCurves, out_png: Path, title: str = "") -> Path:
    """Draw ``curves`` to ``out_png`` (2 x 2 panels). Needs matplotlib."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as err:
        raise ImportError(f"plotting needs matplotlib: {PLOT_HINT}") from err
    fig = Figure(figsize=(11, 7))
    FigureCanvasAgg(fig)
    (loss, lr), (wait, speed) = fig.subplots(2, 2)
    if curves.train_loss:
        loss.plot(*zip(*curves.train_loss), color="tab:blue", lw=1, label="train loss")
    if curves.cv_loss_step:
        loss.plot(*zip(*curves.cv_loss_step), "o-", color="tab:red", label="cv loss")
    loss.set(xlabel="step", ylabel="loss", title="loss (train per step, cv per epoch)")
    if curves.cv_loss_epoch and not curves.cv_loss_step:  # no log: cv per epoch alone
        twin = loss.twiny()
        twin.plot(*zip(*curves.cv_loss_epoch), "o-", color="tab:red", label="cv loss")
        twin.set_xlabel("epoch")
    if curves.train_loss or curves.cv_loss_step:
        loss.legend()
    if curves.lr:
        lr.plot(*zip(*curves.lr), color="tab:green")
    lr.set(xlabel="step", ylabel="learning rate", title="learning rate")
    if curves.data_wait:
        wait.plot(*zip(*curves.data_wait), "o-", color="tab:orange")
    wait.set(xlabel="batch (rank 0)", ylabel="% of time", ylim=(0, 100),
             title="data wait (share of the epoch so far)")
    if curves.throughput:
        speed.plot(*zip(*curves.throughput), "o-", color="tab:purple")
    speed.set(xlabel="batch (rank 0)", ylabel="utterances / s",
              title="throughput (rank 0, epoch so far)")
    for ax in (loss, lr, wait, speed):
        ax.grid(alpha=0.3)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    out_png = Path(out_png)
    out_png.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_png.with_name(f".{out_png.name}.{os.getpid()}.tmp")
    fig.savefig(tmp, dpi=80, format="png")
    os.replace(tmp, out_png)  # atomic: a reader never sees half a PNG
    return out_png
