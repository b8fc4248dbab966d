"""Deterministic partition -> (rank, worker) assignment for `Consumer.assign()`, for any world size.

No consumer group and no rebalancing: every reader computes the same table from
(partitions, world_size, num_workers).

* `world_size <= partitions`: each partition has exactly one reader. Partitions are dealt round-robin over
  readers ordered worker-major (reader g = worker * world_size + rank), so every rank gets a share before any
  rank gets a second worker; ranks differ in partition count by at most one, and when R * W > P the readers
  with the highest worker indices stay idle (a rank simply runs fewer workers).
* `world_size > partitions`: every partition is cut into `k = world_size / gcd(world_size, partitions)`
  stripes (`stripes.py`: stripe s holds the messages whose offset hashes to s), and the P * k stripes are
  dealt the same way, so every rank reads the same number of stripes (P / gcd) and no rank reads two stripes
  of one partition. Each stripe reader fetches its whole partition (read amplification k).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from math import gcd

from pipeline_project.streaming.errors import AssignmentError
from pipeline_project.streaming.load.stripes import Share


@dataclass(frozen=True, order=True)
class Reader:
    rank: int
    worker: int


def stripes_per_partition(n_partitions: int, world_size: int) -> int:
    """1 while every rank can have whole partitions, else the smallest k that gives every rank an equal share."""
    return 1 if world_size <= n_partitions else world_size // gcd(world_size, n_partitions)


def assign_shares(partitions: Iterable[int], *, world_size: int, num_workers: int) -> dict[Reader, tuple[Share, ...]]:
    """Map every reader of the job to its shares (sorted by partition), idle readers to ().

    The table is a pure function of its arguments, identical on every rank.
    """
    parts = sorted(set(partitions))
    if world_size < 1 or num_workers < 1:
        raise AssignmentError(f"world_size and num_workers must be >= 1, got {world_size}, {num_workers}")
    if not parts:
        raise AssignmentError("the topic has no partitions")
    k = stripes_per_partition(len(parts), world_size)
    shares = [Share(p, s, k) for p in parts for s in range(k)]
    n_readers = world_size * num_workers
    table: dict[Reader, list[Share]] = {
        Reader(rank, worker): [] for rank in range(world_size) for worker in range(num_workers)
    }
    for i, share in enumerate(shares):
        g = i % n_readers
        table[Reader(rank=g % world_size, worker=g // world_size)].append(share)
    return {reader: tuple(ss) for reader, ss in table.items()}


def assign_partitions(partitions: Iterable[int], *, world_size: int, num_workers: int) -> dict[Reader, tuple[int, ...]]:
    """`assign_shares` by partition id only."""
    table = assign_shares(partitions, world_size=world_size, num_workers=num_workers)
    return {reader: tuple(s.partition for s in ss) for reader, ss in table.items()}


def shares_for_rank(
    partitions: Iterable[int], *, rank: int, world_size: int, num_workers: int
) -> dict[int, tuple[Share, ...]]:
    """worker -> shares for one rank, idle workers (no shares) left out."""
    if not 0 <= rank < world_size:
        raise AssignmentError(f"rank {rank} is outside world_size {world_size}")
    table = assign_shares(partitions, world_size=world_size, num_workers=num_workers)
    return {r.worker: ss for r, ss in sorted(table.items()) if r.rank == rank and ss}


def partitions_for_rank(
    partitions: Iterable[int], *, rank: int, world_size: int, num_workers: int
) -> dict[int, tuple[int, ...]]:
    """worker -> partitions for one rank, idle workers (no partitions) left out."""
    by_worker = shares_for_rank(partitions, rank=rank, world_size=world_size, num_workers=num_workers)
    return {w: tuple(s.partition for s in ss) for w, ss in by_worker.items()}
