from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline_project.streaming.assignment import (
    AssignmentError,
    Reader,
    assign_partitions,
    partitions_for_rank,
)


@pytest.mark.parametrize(
    ("world_size", "num_workers", "n_partitions"),
    [(1, 1, 1), (1, 1, 8), (2, 1, 8), (2, 2, 8), (2, 3, 8), (3, 2, 8), (4, 4, 8), (8, 1, 8), (3, 1, 7), (2, 4, 5)],
)
def test_every_partition_has_exactly_one_reader(world_size, num_workers, n_partitions):
    table = assign_partitions(range(n_partitions), world_size=world_size, num_workers=num_workers)
    assert set(table) == {Reader(r, w) for r in range(world_size) for w in range(num_workers)}
    counts = Counter(p for ps in table.values() for p in ps)
    assert counts == Counter(range(n_partitions))


@given(
    world_size=st.integers(1, 6),
    num_workers=st.integers(1, 6),
    partitions=st.sets(st.integers(0, 200), min_size=1, max_size=40),
)
def test_assignment_properties(world_size, num_workers, partitions):
    if world_size > len(partitions):
        with pytest.raises(AssignmentError, match="some rank would get no data"):
            assign_partitions(partitions, world_size=world_size, num_workers=num_workers)
        return
    table = assign_partitions(partitions, world_size=world_size, num_workers=num_workers)
    flat = [p for ps in table.values() for p in ps]
    assert sorted(flat) == sorted(partitions)
    per_rank = Counter()
    for reader, ps in table.items():
        per_rank[reader.rank] += len(ps)
        assert list(ps) == sorted(ps)
    # every rank has data and ranks differ by at most one partition
    assert min(per_rank[r] for r in range(world_size)) >= 1
    assert max(per_rank.values()) - min(per_rank[r] for r in range(world_size)) <= 1
    # deterministic: the same table on every call (every rank computes it independently)
    assert table == assign_partitions(sorted(partitions, reverse=True), world_size=world_size, num_workers=num_workers)


def test_idle_workers_are_the_highest_and_are_left_out_per_rank():
    # 2 ranks x 3 workers = 6 readers for 4 partitions: worker 2 of each rank idle
    by_rank = [partitions_for_rank(range(4), rank=r, world_size=2, num_workers=3) for r in range(2)]
    assert by_rank == [{0: (0,), 1: (2,)}, {0: (1,), 1: (3,)}]


def test_more_ranks_than_partitions_is_a_clear_error():
    with pytest.raises(AssignmentError, match="world_size=4 ranks but only 3 partitions"):
        assign_partitions(range(3), world_size=4, num_workers=1)


def test_rank_outside_world_size_is_an_error():
    with pytest.raises(AssignmentError, match="rank 2 is outside world_size 2"):
        partitions_for_rank(range(8), rank=2, world_size=2, num_workers=1)
