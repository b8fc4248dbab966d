"""Stripes of a shared partition and the union of their positions, as pure logic (`streaming/stripes.py`).

The simulation reads one partition the way stripe readers do (pass over other stripes' messages and what the
skips name, start a message at its first unconsumed block, stop anywhere, even inside a message), saves every
stripe's entry, merges them and resumes under another stripe count: no block is delivered twice, and the blocks
delivered are exactly those the final merged position counts as consumed.
"""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline_project.streaming.errors import StateError
from pipeline_project.streaming.load.state import merge_positions
from pipeline_project.streaming.load.stripes import (
    ALL,
    Share,
    Skips,
    consumed_blocks,
    make_entry,
    merge_partition,
    share_start,
    stripe_of,
)


def _read(blocks: list[int], share: Share, start: tuple[int, int, Skips], budget: int, out: list) -> dict:
    """Deliver up to `budget` blocks of `share` from `start` into `out`; the stripe's entry after them."""
    o, block, skips = start  # `block`: blocks already consumed of the message at `o`
    while o < len(blocks) and budget > 0:
        first = skips.first_block(o) if share.owns(o) else None
        n = blocks[o]
        if first is None or n == 0:  # another stripe's, consumed before, or a transaction marker
            o, block = o + 1, 0
            continue
        first = max(first, block)
        take = min(n - first, budget)
        out.extend((o, b) for b in range(first, first + take))
        budget -= take
        if first + take < n:
            return make_entry(share, o, first + take, skips)
        o, block = o + 1, 0
    return make_entry(share, o, block, skips)


@settings(max_examples=200, deadline=None)
@given(
    blocks=st.lists(st.integers(0, 3), min_size=1, max_size=60),
    phases=st.lists(
        st.tuples(st.integers(1, 5), st.lists(st.integers(0, 12), min_size=5, max_size=5)), min_size=1, max_size=5
    ),
)
def test_any_sequence_of_stripe_counts_delivers_each_block_at_most_once_and_positions_say_which(blocks, phases):
    merged = make_entry(Share(0), 0, 0)
    out: list[tuple[int, int]] = []
    for k, budgets in phases:
        entries = [
            _read(blocks, Share(0, s, k), share_start(merged, Share(0, s, k)), budgets[s], out) for s in range(k)
        ]
        merged = merge_partition(0, entries)
    counts = Counter(out)
    assert all(c == 1 for c in counts.values()), "a block was delivered twice"
    expected = set()
    for o, n in enumerate(blocks):
        used = consumed_blocks(merged, o)
        expected |= {(o, b) for b in range(n if used == ALL else used)}
    assert set(out) == expected


def test_merge_keeps_what_the_leading_stripe_read_above_the_slowest():
    k = 2
    owner = [stripe_of(o, k) for o in range(20)]
    ahead = next(o for o in range(5, 20) if owner[o] == 1)
    slow = make_entry(Share(0, 0, 2), 3, 0)
    fast = make_entry(Share(0, 1, 2), ahead + 1, 0)
    merged = merge_partition(0, [slow, fast])
    first_gap = next(o for o in range(3, 20) if owner[o] == 0)
    assert merged["offset"] == first_gap
    done = {o for a, b in merged.get("done", ()) for o in range(a, b)}
    assert done == {o for o in range(first_gap + 1, ahead + 1) if owner[o] == 1}
    # a one-stripe resume skips exactly those
    offset, block, skips = share_start(merged, Share(0))
    assert (offset, block) == (first_gap, 0) and skips.done == frozenset(done)


def test_a_partly_read_message_resumes_at_its_next_block_under_any_stripe_count():
    owned = next(o for o in range(50) if stripe_of(o, 3) == 2 and o > 0)
    entries = [make_entry(Share(0, s, 3), owned if s == 2 else owned + 1, 2 if s == 2 else 0) for s in range(3)]
    merged = merge_partition(0, entries)
    assert (merged["offset"], merged["block"]) == (owned, 2)
    for k in (1, 2, 5):
        starts = [share_start(merged, Share(0, s, k)) for s in range(k)]
        owner = stripe_of(owned, k)
        assert [(o, b) for o, b, _ in starts] == [(owned, 2 if s == owner else 0) for s in range(k)]


def test_incomplete_or_conflicting_stripes_are_refused():
    with pytest.raises(StateError, match=r"no state for stripes \[1\] of 2"):
        merge_partition(0, [make_entry(Share(0, 0, 2), 4, 0)])
    with pytest.raises(StateError, match="different stripe layouts"):
        merge_partition(0, [make_entry(Share(0, 0, 2), 4, 0), make_entry(Share(0), 4, 0)])
    with pytest.raises(StateError, match=r"no state names partitions \[2\] of 3: pass every rank's state"):
        merge_positions([{"0": make_entry(Share(0), 1, 0)}, {"1": make_entry(Share(1), 1, 0)}], 3)


def test_identical_entries_from_several_ranks_merge_into_one():
    entry = make_entry(Share(3), 7, 1, Skips(frozenset({9, 10}), {12: 2}))
    assert (
        merge_partition(3, [entry, dict(entry)])
        == entry
        == {
            "offset": 7,
            "block": 1,
            "done": [[9, 11]],
            "partial": [[12, 2]],
        }
    )


def test_stripes_spread_runs_of_offsets_evenly():
    # transaction markers take every other offset of a one-message-per-partition transaction: offset parity
    # would put every message in one stripe of two; the hash does not care
    counts = Counter(stripe_of(o, 2) for o in range(0, 4000, 2))
    assert abs(counts[0] - counts[1]) < 200
