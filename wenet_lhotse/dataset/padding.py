"""Padding per-utterance arrays into batch rows, in the batch's order, in one pass.

WeNet's ``padding`` sorts a batch longest first and pads each field with
``pad_sequence``. Lhotse's ``collate_vectors`` / ``collate_matrices`` pad in input order
after pre-filling the whole matrix (``new_ones(...) * padding_value``), and the sort is
then one more gather: four passes over the batch's biggest tensors (``pcm`` is 160
floats per feature frame). :func:`pad_rows` writes each row once, straight into its
place in the sorted batch, and fills only the rows' tails.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Callable, Optional, Sequence, Tuple, Union

import numpy as np
import torch

Row = Union[np.ndarray, torch.Tensor]

#: Where :func:`pad_rows` puts its output: ``(shape, dtype) -> tensor or None`` (None:
#: a fresh tensor). A DataLoader worker's shared-memory slot while it makes a batch
#: (:meth:`~wenet_lhotse.loader.transport.BatchRing.reserve`), so the padded rows are
#: written once, where the training process reads them.
row_allocator: ContextVar[Optional[Callable[[Tuple[int, ...], torch.dtype],
                                            Optional[torch.Tensor]]]] = ContextVar(
    "row_allocator", default=None)


def pad_rows(rows: Sequence[Row], order: Sequence[int], padding_value: float = 0.0,
             trailing: Tuple[int, ...] = ()) -> torch.Tensor:
    """``(len(order), max_len, *trailing)``: row ``r`` is ``rows[order[r]]`` (lengths on
    the first axis), padded with ``padding_value``. ``trailing`` gives the shape of
    an empty batch's rows (e.g. the feature dimension)."""
    picked = [torch.as_tensor(rows[i]) for i in order]
    if not picked:
        return torch.zeros((0, 0, *trailing))
    max_len = max(t.shape[0] for t in picked)
    shape = (len(picked), max_len, *picked[0].shape[1:])
    alloc = row_allocator.get()
    out = alloc(shape, picked[0].dtype) if alloc is not None else None
    if out is None:
        out = torch.empty(shape, dtype=picked[0].dtype)
    for r, t in enumerate(picked):
        n = t.shape[0]
        out[r, :n] = t
        if n < max_len:
            out[r, n:] = padding_value
    return out
