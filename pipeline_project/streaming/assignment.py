"""Deterministic partition -> (rank, worker) assignment for `Consumer.assign()`.

No consumer group and no rebalancing: every reader computes the same table from
(partitions, world_size, num_workers), so R ranks x W workers read P partitions with
exactly one reader per partition.

Partitions are dealt round-robin over readers ordered worker-major
(reader g = worker * world_size + rank), so every rank gets a share before any rank
gets a second worker. Consequences, by design:

* ranks differ in partition count by at most one;
* when R * W > P the readers with the highest worker indices get no partition and stay
  idle (documented, not an error): a rank simply runs fewer workers;
* when R > P some rank would have no data at all, which would hang a DDP step, so that
  raises `AssignmentError`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from pipeline_project.streaming.errors import AssignmentError


@dataclass(frozen=True, order=True)
class Reader:
    rank: int
    worker: int


def assign_partitions(partitions: Iterable[int], *, world_size: int, num_workers: int) -> dict[Reader, tuple[int, ...]]:
    """Map every reader of the job to its partitions (sorted), idle readers to ().

    The table is a pure function of its arguments, identical on every rank.
    """
    parts = sorted(set(partitions))
    if world_size < 1 or num_workers < 1:
        raise AssignmentError(f"world_size and num_workers must be >= 1, got {world_size}, {num_workers}")
    if not parts:
        raise AssignmentError("the topic has no partitions")
    if world_size > len(parts):
        raise AssignmentError(
            f"world_size={world_size} ranks but only {len(parts)} partitions: some rank would get no data; "
            f"create the topic with at least {world_size} partitions"
        )
    n_readers = world_size * num_workers
    table: dict[Reader, list[int]] = {
        Reader(rank, worker): [] for rank in range(world_size) for worker in range(num_workers)
    }
    for i, partition in enumerate(parts):
        g = i % n_readers
        table[Reader(rank=g % world_size, worker=g // world_size)].append(partition)
    return {reader: tuple(ps) for reader, ps in table.items()}


def partitions_for_rank(
    partitions: Iterable[int], *, rank: int, world_size: int, num_workers: int
) -> dict[int, tuple[int, ...]]:
    """worker -> partitions for one rank, idle workers (no partitions) left out."""
    if not 0 <= rank < world_size:
        raise AssignmentError(f"rank {rank} is outside world_size {world_size}")
    table = assign_partitions(partitions, world_size=world_size, num_workers=num_workers)
    return {r.worker: ps for r, ps in sorted(table.items()) if r.rank == rank and ps}
