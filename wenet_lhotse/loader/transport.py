"""Batches from DataLoader workers to the training process through reused shared memory.

PyTorch's DataLoader moves every tensor a worker returns into a *new* shared-memory
segment, per tensor and per batch: the worker writes into freshly allocated pages, the
main process maps them, and both unmap them when the tensor dies. Fresh shared pages
are what costs (page faults, zeroing; measured ~1 CPU ms per MB on the development VM,
more than computing the fbank of the audio those bytes carry: ``bench/profile_loader.py``,
"transfer"). :class:`BatchRing` reuses memory instead:

* before the workers fork, the loader maps ``slots`` fixed shared-memory regions per
  worker (anonymous ``MAP_SHARED``, inherited by the forked workers, never renamed or
  unlinked: they vanish with the last process that maps them);
* a worker copies the tensors of its batch dict into one of *its* free slots and sends
  only their layout (:class:`SlotBatch`: offsets, dtypes, shapes, and the batch's other
  values as they are);
* the training process wraps the slot memory as tensors (no copy; writable) and frees
  the slot when the last of them -- views included -- is garbage-collected; with
  ``pin_memory`` they are copied into pinned memory at once, as the DataLoader would.

Contract: the batch the training loop sees is the one the dataset returned (same keys,
order, values, dtypes, shapes; CPU tensors). A batch goes the DataLoader's ordinary way
when it is not a dict, holds a tensor dtype numpy lacks (bfloat16) or a non-CPU or
non-contiguous-able tensor, does not fit a slot, or all of the worker's slots are still
held by the training process (e.g. it keeps old batches) -- never blocked, never
overwritten while in use. Only for persistent workers started with ``fork`` (one set of
workers for the ring's lifetime; slot ownership is per worker id); otherwise the ring
is not used.
"""

from __future__ import annotations

import itertools
import logging
import mmap
import os
import threading
import weakref
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import torch

logger = logging.getLogger(__name__)

#: Bytes reserved per slot (virtual; only pages a batch touched become resident).
SLOT_BYTES = 64 << 20
_ALIGN = 64
_NUMPY = {torch.float32: np.float32, torch.float64: np.float64, torch.float16: np.float16,
          torch.int64: np.int64, torch.int32: np.int32, torch.int16: np.int16,
          torch.int8: np.int8, torch.uint8: np.uint8, torch.bool: np.bool_}
_RINGS: Dict[int, weakref.ref[BatchRing]] = {}
_TOKENS = itertools.count()

#: A tensor's place in a slot: (byte offset, dtype, shape).
Layout = Tuple[int, torch.dtype, Tuple[int, ...]]


class SlotBatch:
    """What a worker sends instead of a batch dict: ``entries`` in the dict's order,
    each ``(key, Layout, None)`` for a tensor in the slot or ``(key, None, value)``."""

    def __init__(self, token: int, slot: int, entries: List[Tuple[str, Any, Any]]) -> None:
        self.token, self.slot, self.entries = token, slot, entries
        self._ring: Optional[BatchRing] = None  # set where received (the training process)

    def __getstate__(self) -> Tuple[int, int, List[Tuple[str, Any, Any]]]:
        return self.token, self.slot, self.entries

    def __setstate__(self, state: Tuple[int, int, List[Tuple[str, Any, Any]]]) -> None:
        self.token, self.slot, self.entries = state
        ref = _RINGS.get(self.token)
        self._ring = ref() if ref is not None else None

    def __del__(self) -> None:
        ring, self._ring = self._ring, None
        if ring is not None:  # received but never unpacked (a drained prefetch)
            ring.free(self.slot)


class _Lease:
    """Frees a slot when the last tensor made from it is gone."""

    def __init__(self, ring: BatchRing, slot: int) -> None:
        self.ring, self.slot, self.count = ring, slot, 0
        self.lock = threading.Lock()

    def take(self, array: np.ndarray) -> None:
        with self.lock:
            self.count += 1
        weakref.finalize(array, self.drop)

    def drop(self) -> None:
        with self.lock:
            self.count -= 1
            done = self.count == 0
        if done:
            self.ring.free(self.slot)


class BatchRing:
    """``slots`` shared-memory slots of ``slot_bytes`` for each of ``num_workers``
    DataLoader workers. Make it in the training process before the workers fork;
    workers call :meth:`pack`, the training process :meth:`unpack`."""

    def __init__(self, num_workers: int, slots: int = 4, slot_bytes: int = SLOT_BYTES) -> None:
        self.num_workers, self.slots, self.slot_bytes = int(num_workers), int(slots), slot_bytes
        n = self.num_workers * self.slots
        self._maps = [mmap.mmap(-1, slot_bytes) for _ in range(n)]  # MAP_SHARED | ANONYMOUS
        self._state = np.frombuffer(mmap.mmap(-1, max(n, 1)), dtype=np.uint8)  # 1: in use
        self._owner = os.getpid()
        self.token = next(_TOKENS)
        _RINGS[self.token] = weakref.ref(self)
        self.shipped = 0  # batches this process sent through the ring (a worker's count)

    def __getstate__(self) -> Dict[str, Any]:
        raise TypeError("a BatchRing is inherited by forked workers, never pickled")

    def free(self, slot: int) -> None:
        self._state[slot] = 0

    def busy(self) -> int:
        """Slots in use (sent and not yet freed), all workers."""
        return int(self._state.sum())

    # -- worker side ---------------------------------------------------------------
    def pack(self, batch: Any) -> Any:
        """In a DataLoader worker: ``batch`` with its tensors moved into a free slot (a
        :class:`SlotBatch`), or ``batch`` itself when the ring cannot take it."""
        info = torch.utils.data.get_worker_info()
        if info is None or os.getpid() == self._owner or not isinstance(batch, dict):
            return batch
        wid = info.id
        if wid >= self.num_workers:
            return batch
        layout, end = [], 0
        for key, value in batch.items():
            if isinstance(value, torch.Tensor):
                if value.device.type != "cpu" or value.dtype not in _NUMPY or value.is_sparse:
                    return batch
                layout.append((key, (end, value.dtype, tuple(value.shape)), value))
                end += -(-value.numel() * value.element_size() // _ALIGN) * _ALIGN
            else:
                layout.append((key, None, value))
        if end > self.slot_bytes:
            logger.debug("batch of %d bytes > ring slot of %d: sent the ordinary way", end,
                         self.slot_bytes)
            return batch
        first = wid * self.slots
        free = [s for s in range(first, first + self.slots) if self._state[s] == 0]
        if not free:
            return batch
        slot = free[0]
        self._state[slot] = 1
        try:
            mm = self._maps[slot]
            entries = []
            for key, where, value in layout:
                if where is None:
                    entries.append((key, None, value))
                    continue
                if value.numel():
                    dst = np.frombuffer(mm, dtype=_NUMPY[value.dtype], count=value.numel(),
                                        offset=where[0])
                    torch.from_numpy(dst).view(value.shape).copy_(value)
                entries.append((key, where, None))
        except BaseException:
            self._state[slot] = 0
            raise
        self.shipped += 1
        return SlotBatch(self.token, slot, entries)

    # -- training-process side -----------------------------------------------------
    def unpack(self, item: Any, pin: bool = False, pin_device: Optional[str] = None) -> Any:
        """The batch dict a :class:`SlotBatch` stands for (anything else unchanged); its
        tensors live in the slot until garbage-collected. With ``pin`` they are copied
        into pinned memory instead (for ``pin_device``), as the DataLoader's pin-memory
        thread does with ordinary batches, and the slot is freed at once."""
        if not isinstance(item, SlotBatch):
            return item
        item._ring = None  # the lease takes over freeing the slot
        mm = self._maps[item.slot]
        lease = _Lease(self, item.slot)
        out: Dict[str, Any] = {}
        for key, where, value in item.entries:
            if where is None:
                out[key] = value
                continue
            offset, dtype, shape = where
            count = int(np.prod(shape, dtype=np.int64))
            if count == 0:
                out[key] = torch.empty(shape, dtype=dtype)
                continue
            array = np.frombuffer(mm, dtype=_NUMPY[dtype], count=count, offset=offset)
            lease.take(array)
            out[key] = torch.from_numpy(array).view(shape)
        if lease.count == 0:
            self.free(item.slot)
        if pin:
            from torch.utils.data._utils.pin_memory import pin_memory

            out = pin_memory(out, pin_device)
        return out
