"""Which part of a list of tars (or any shards) one reader reads; fixed-size chunks."""

from __future__ import annotations

from typing import Iterable, Iterator, List, Sequence, TypeVar

T = TypeVar("T")


def reader_share(items: Sequence[T], rank: int, world_size: int, worker: int = 0,
                 num_workers: int = 1) -> List[T]:
    """``items[rank::world_size][worker::num_workers]``: every (rank, DataLoader worker)
    pair gets its own items, and all pairs together get each item exactly once."""
    if not (0 <= rank < world_size and 0 <= worker < num_workers):
        raise ValueError(f"bad split: rank {rank}/{world_size}, worker {worker}/{num_workers}")
    return list(items)[rank::world_size][worker::num_workers]


def chunked(items: Iterable[T], size: int) -> Iterator[List[T]]:
    """Consecutive lists of ``size`` items (the last may be shorter), streamed."""
    chunk: List[T] = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk
