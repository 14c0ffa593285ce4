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
  values as they are); the biggest ones (``feats``, ``pcm``) are not even copied: the
  worker takes the slot before making the batch (:meth:`BatchRing.reserve`) and
  ``pad_rows`` pads them straight into it (measured: padding and handing over a batch
  of 16 utterances of 3-13 s with ``pcm`` took 4.3-5.4 instead of 8.2-9.0 CPU ms);
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

import contextlib
import itertools
import logging
import mmap
import os
import threading
import weakref
from typing import Any, Dict, Iterator, List, Optional, Tuple

import numpy as np
import torch

from wenet_lhotse.dataset import padding

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

    #: set where received (the training process); a class default, so ``__del__`` of
    #: one whose unpickling failed half-way (a worker killed mid-send) has it too
    _ring: Optional[BatchRing] = None

    def __init__(self, token: int, slot: int, entries: List[Tuple[str, Any, Any]]) -> None:
        self.token, self.slot, self.entries = token, slot, entries

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


class _Reservation:
    """A slot taken by :meth:`BatchRing.reserve`: hands out aligned pieces of it, front
    to back, as tensors (``None`` once full)."""

    def __init__(self, ring: BatchRing, slot: int) -> None:
        self.ring, self.slot, self.end = ring, slot, 0
        self.base = np.frombuffer(ring._maps[slot], dtype=np.uint8, count=1).ctypes.data

    def alloc(self, shape: Tuple[int, ...], dtype: torch.dtype) -> Optional[torch.Tensor]:
        if dtype not in _NUMPY:
            return None
        count = int(np.prod(shape, dtype=np.int64))
        size = -(-count * np.dtype(_NUMPY[dtype]).itemsize // _ALIGN) * _ALIGN
        if count == 0 or self.end + size > self.ring.slot_bytes:
            return None
        array = np.frombuffer(self.ring._maps[self.slot], dtype=_NUMPY[dtype], count=count,
                              offset=self.end)
        self.end += size
        return torch.from_numpy(array).view(shape)

    def offset_of(self, t: torch.Tensor) -> Optional[int]:
        """Where ``t`` lies in the handed-out part of the slot, if it is a contiguous
        tensor there."""
        start = t.data_ptr() - self.base
        if t.numel() == 0 or not t.is_contiguous() or start < 0 \
                or start + t.numel() * t.element_size() > self.end:
            return None
        return start


def _evacuated(batch: Any, res: Optional[_Reservation]) -> Any:
    """``batch`` for the DataLoader's ordinary path: tensors in the reserved slot, which
    is reused once released, are cloned out of it first."""
    if res is None or not isinstance(batch, dict):
        return batch  # pad_rows only fills tensors a dict batch holds
    return {k: v.clone() if isinstance(v, torch.Tensor) and res.offset_of(v) is not None
            else v for k, v in batch.items()}


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
        self._reserved: Optional[_Reservation] = None  # a worker's slot for the batch in making

    def __getstate__(self) -> Dict[str, Any]:
        raise TypeError("a BatchRing is inherited by forked workers, never pickled")

    def free(self, slot: int) -> None:
        self._state[slot] = 0

    def busy(self) -> int:
        """Slots in use (sent and not yet freed), all workers."""
        return int(self._state.sum())

    # -- worker side ---------------------------------------------------------------
    @contextlib.contextmanager
    def reserve(self) -> Iterator[None]:
        """In a DataLoader worker, around making and packing one batch: takes a free
        slot of this worker now, so that :func:`~wenet_lhotse.dataset.padding.pad_rows`
        pads the batch's big tensors straight into it (no second copy into the slot in
        :meth:`pack`, no fresh pages per batch); released again unless :meth:`pack`
        sent the batch through it. Does nothing outside a worker or when no slot is
        free."""
        slot = self._free_slot()
        if slot is None:
            yield
            return
        self._state[slot] = 1
        self._reserved = _Reservation(self, slot)
        token = padding.row_allocator.set(self._reserved.alloc)
        try:
            yield
        finally:
            padding.row_allocator.reset(token)
            res, self._reserved = self._reserved, None
            if res is not None:  # not sent: the slot is ours to give back
                self._state[slot] = 0

    def _free_slot(self) -> Optional[int]:
        info = torch.utils.data.get_worker_info()
        if info is None or os.getpid() == self._owner or info.id >= self.num_workers:
            return None
        first = info.id * self.slots
        return next((s for s in range(first, first + self.slots) if self._state[s] == 0),
                    None)

    def pack(self, batch: Any) -> Any:
        """In a DataLoader worker: ``batch`` with its tensors moved into a free slot (a
        :class:`SlotBatch`), or ``batch`` itself when the ring cannot take it. Tensors
        already in the slot :meth:`reserve` took stay where they are."""
        res, self._reserved = self._reserved, None
        try:
            out = self._pack(batch, res)
        except BaseException:
            if res is not None:
                self._state[res.slot] = 0
            raise
        if res is not None and not isinstance(out, SlotBatch):
            self._state[res.slot] = 0  # sent the ordinary way (cloned out of the slot)
        return out

    def _pack(self, batch: Any, res: Optional[_Reservation]) -> Any:
        if not isinstance(batch, dict):
            return _evacuated(batch, res)
        slot = res.slot if res is not None else self._free_slot()
        if slot is None:
            return batch
        layout, end = [], res.end if res is not None else 0
        for key, value in batch.items():
            if isinstance(value, torch.Tensor):
                if value.device.type != "cpu" or value.dtype not in _NUMPY or value.is_sparse:
                    return _evacuated(batch, res)
                at = res.offset_of(value) if res is not None else None
                if at is None:  # copied in after what the reservation handed out
                    at = end
                    end += -(-value.numel() * value.element_size() // _ALIGN) * _ALIGN
                    layout.append((key, (at, value.dtype, tuple(value.shape)), value))
                else:
                    layout.append((key, (at, value.dtype, tuple(value.shape)), None))
            else:
                layout.append((key, None, value))
        if end > self.slot_bytes:
            logger.debug("batch of %d bytes > ring slot of %d: sent the ordinary way", end,
                         self.slot_bytes)
            return _evacuated(batch, res)
        self._state[slot] = 1
        try:
            mm = self._maps[slot]
            entries = []
            for key, where, value in layout:
                if where is not None and value is not None and value.numel():
                    dst = np.frombuffer(mm, dtype=_NUMPY[value.dtype], count=value.numel(),
                                        offset=where[0])
                    torch.from_numpy(dst).view(value.shape).copy_(value)
                entries.append((key, where, None if where is not None else value))
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
