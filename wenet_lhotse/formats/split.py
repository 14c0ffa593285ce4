"""Which part of a list of tars (or any shards) one reader reads."""

from __future__ import annotations

from typing import List, Sequence, TypeVar

T = TypeVar("T")


def reader_share(items: Sequence[T], rank: int, world_size: int, worker: int = 0,
                 num_workers: int = 1) -> List[T]:
    """``items[rank::world_size][worker::num_workers]``: every (rank, DataLoader worker)
    pair gets its own items, and all pairs together get each item exactly once."""
    if not (0 <= rank < world_size and 0 <= worker < num_workers):
        raise ValueError(f"bad split: rank {rank}/{world_size}, worker {worker}/{num_workers}")
    return list(items)[rank::world_size][worker::num_workers]
