from collections import Counter
from math import gcd

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline_project.streaming.load.assignment import (
    AssignmentError,
    Reader,
    assign_partitions,
    assign_shares,
    partitions_for_rank,
    shares_for_rank,
)
from pipeline_project.streaming.load.stripes import Share


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
    table = assign_shares(partitions, world_size=world_size, num_workers=num_workers)
    k = 1 if world_size <= len(partitions) else world_size // gcd(world_size, len(partitions))
    flat = [s for ss in table.values() for s in ss]
    # every stripe of every partition has exactly one reader
    assert sorted(flat) == [Share(p, i, k) for p in sorted(partitions) for i in range(k)]
    per_rank = Counter()
    for reader, ss in table.items():
        per_rank[reader.rank] += len(ss)
        assert list(ss) == sorted(ss)
    by_rank = {r: [s.partition for rd, ss in table.items() if rd.rank == r for s in ss] for r in range(world_size)}
    # every rank has data, no rank reads two stripes of one partition, ranks differ by at most one share
    # (and hold equal shares when they outnumber the partitions)
    assert all(by_rank[r] and len(set(by_rank[r])) == len(by_rank[r]) for r in range(world_size))
    assert max(per_rank.values()) - min(per_rank[r] for r in range(world_size)) <= (1 if k == 1 else 0)
    # deterministic: the same table on every call (every rank computes it independently)
    assert table == assign_shares(sorted(partitions, reverse=True), world_size=world_size, num_workers=num_workers)


def test_idle_workers_are_the_highest_and_are_left_out_per_rank():
    # 2 ranks x 3 workers = 6 readers for 4 partitions: worker 2 of each rank idle
    by_rank = [partitions_for_rank(range(4), rank=r, world_size=2, num_workers=3) for r in range(2)]
    assert by_rank == [{0: (0,), 1: (2,)}, {0: (1,), 1: (3,)}]


def test_more_ranks_than_partitions_share_them_by_stripes():
    # the shipped JobSet: 16 ranks on 8 partitions -> every rank reads one half of one partition
    by_rank = [shares_for_rank(range(8), rank=r, world_size=16, num_workers=1) for r in range(16)]
    assert [ss[0][0] for ss in by_rank] == [Share(p, s, 2) for p in range(8) for s in range(2)]
    # 6 ranks on 4 partitions: thirds, two per rank, of different partitions
    six = [shares_for_rank(range(4), rank=r, world_size=6, num_workers=1)[0] for r in range(6)]
    assert six[0] == (Share(0, 0, 3), Share(2, 0, 3))
    assert all(len(ss) == 2 and ss[0].partition != ss[1].partition for ss in six)


def test_rank_outside_world_size_is_an_error():
    with pytest.raises(AssignmentError, match="rank 2 is outside world_size 2"):
        partitions_for_rank(range(8), rank=2, world_size=2, num_workers=1)
