"""Positions that belong to partitions, not to ranks: stripes of a shared partition and their union.

When ranks outnumber partitions, several ranks read one partition, each a *stripe* of it: stripe `s` of `k`
holds the messages whose offset hashes to `s` (`stripe_of`, a fixed 64-bit mix of the offset, so transaction
markers cannot line up with one stripe). A stripe reader fetches the whole partition and passes over the
other stripes' messages.

A stripe's position is a `Cursor` (every message of the stripe below `offset` is consumed, and the first
`block` blocks of the message at `offset`) plus `Skips`: messages at or above the cursor that an earlier
layout already consumed, whole (`done`) or their first blocks (`partial`). In a state, one partition entry::

    {"offset": 120, "block": 2, "stripe": [1, 3], "done": [[125, 127], [140, 141]], "partial": [[150, 1]]}

(`stripe` is left out for a whole partition, `done` / `partial` when empty; `done` holds half-open ranges.)

`merge_partition` takes the entries of every stripe of a partition (one per rank that read it) and returns
their union as one whole-partition entry: `offset` is the first message not wholly consumed (`block` of it
consumed), and `done` / `partial` name what was consumed above it. `share_start` cuts that union down to the
stripe a new layout gives a rank. So any world size resumes from any other: nothing consumed is read again,
nothing unconsumed is skipped, and a partition no state names (a topic that grew) starts at its log start.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pipeline_project.streaming.errors import StateError

MASK = (1 << 64) - 1
ALL = -1  # consumed_blocks(): the whole message was consumed


def stripe_of(offset: int, stripes: int) -> int:
    """The stripe (0..stripes-1) that owns the message at `offset` (splitmix64 of the offset)."""
    if stripes == 1:
        return 0
    z = (offset + 0x9E3779B97F4A7C15) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return (z ^ (z >> 31)) % stripes


@dataclass(frozen=True, order=True)
class Share:
    """What one reader reads of a partition: all of it (`stripes` 1) or stripe `stripe` of `stripes`."""

    partition: int
    stripe: int = 0
    stripes: int = 1

    def owns(self, offset: int) -> bool:
        return self.stripes == 1 or stripe_of(offset, self.stripes) == self.stripe


@dataclass(frozen=True)
class Skips:
    """Messages at or above a cursor that were already consumed: whole (`done`), or their first blocks."""

    done: frozenset[int] = frozenset()
    partial: Mapping[int, int] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.done or self.partial)

    def first_block(self, offset: int) -> int | None:
        """The first block of the message at `offset` still to deliver; None: skip the whole message."""
        if offset in self.done:
            return None
        return self.partial.get(offset, 0)

    def above(self, offset: int, block: int) -> Skips:
        """What is still ahead of cursor (offset, block): a message the cursor has started is behind it."""
        keep = (lambda o: o > offset) if block else (lambda o: o >= offset)
        return Skips(frozenset(o for o in self.done if keep(o)), {o: j for o, j in self.partial.items() if keep(o)})


def to_ranges(offsets: Iterable[int]) -> list[list[int]]:
    """Sorted offsets as half-open [first, end) runs."""
    runs: list[list[int]] = []
    for o in sorted(offsets):
        if runs and runs[-1][1] == o:
            runs[-1][1] = o + 1
        else:
            runs.append([o, o + 1])
    return runs


def from_ranges(runs: Iterable[Sequence[int]]) -> frozenset[int]:
    return frozenset(o for a, b in runs for o in range(int(a), int(b)))


def parse_entry(partition: int | str, entry: Mapping[str, Any]) -> tuple[Share, int, int, Skips]:
    """(share, offset, block, skips) of one partition entry of a state."""
    offset, block = int(entry["offset"]), int(entry.get("block", 0))
    s, k = (int(x) for x in entry.get("stripe", (0, 1)))
    if offset < 0 or block < 0 or not 0 <= s < k:
        raise StateError(f"partition {partition}: bad position {dict(entry)}")
    partial = {int(o): int(j) for o, j in entry.get("partial", ())}
    return Share(int(partition), s, k), offset, block, Skips(from_ranges(entry.get("done", ())), partial)


def make_entry(share: Share, offset: int, block: int, skips: Skips = Skips()) -> dict[str, Any]:
    """The JSON entry of a reader's position; `skips` behind the cursor are dropped."""
    entry: dict[str, Any] = {"offset": offset, "block": block}
    if share.stripes > 1:
        entry["stripe"] = [share.stripe, share.stripes]
    ahead = skips.above(offset, block)
    if ahead.done:
        entry["done"] = to_ranges(ahead.done)
    if ahead.partial:
        entry["partial"] = [[o, j] for o, j in sorted(ahead.partial.items())]
    return entry


def _status(stripes: Mapping[int, tuple[Share, int, int, Skips]], k: int, offset: int) -> int:
    """Blocks consumed of the message at `offset` (ALL: the whole message) by the stripe that owns it."""
    _, cursor, block, skips = stripes[stripe_of(offset, k)]
    if offset < cursor or offset in skips.done:
        return ALL
    if offset == cursor and block:
        return block
    return skips.partial.get(offset, 0)


def merge_partition(partition: int | str, entries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The union of every stripe's position of one partition, as one whole-partition entry (see the module)."""
    unique: list[Mapping[str, Any]] = []
    for e in entries:
        if e not in unique:
            unique.append(e)
    parsed = [parse_entry(partition, e) for e in unique]
    ks = {sh.stripes for sh, *_ in parsed}
    if len(ks) != 1:
        raise StateError(f"partition {partition}: states of different stripe layouts {sorted(ks)}")
    k = ks.pop()
    stripes: dict[int, tuple[Share, int, int, Skips]] = {}
    for item in parsed:
        if item[0].stripe in stripes:
            which = f" (stripe {item[0].stripe} of {k})" if k > 1 else ""
            raise StateError(f"partition {partition}{which} appears in two rank states with different cursors")
        stripes[item[0].stripe] = item
    missing = sorted(set(range(k)) - set(stripes))
    if missing:
        raise StateError(f"partition {partition}: no state for stripes {missing} of {k}; pass every rank's state")
    low = min(c for _, c, _, _ in stripes.values())
    high = max(max([c + 1, *sk.done, *sk.partial]) for _, c, _, sk in stripes.values()) + 1
    base = low
    while base < high and _status(stripes, k, base) == ALL:
        base += 1
    block = _status(stripes, k, base) if base < high else 0
    done, partial = [], {}
    for o in range(base + 1, high):
        consumed = _status(stripes, k, o)
        if consumed == ALL:
            done.append(o)
        elif consumed:
            partial[o] = consumed
    return make_entry(Share(int(partition)), base, block, Skips(frozenset(done), partial))


def share_start(entry: Mapping[str, Any], share: Share) -> tuple[int, int, Skips]:
    """(offset, block, skips) where `share` starts, from a whole-partition entry (`merge_partition`'s)."""
    _, offset, block, skips = parse_entry(share.partition, entry)
    if share.stripes == 1:
        return offset, block, skips
    mine = Skips(
        frozenset(o for o in skips.done if share.owns(o)), {o: j for o, j in skips.partial.items() if share.owns(o)}
    )
    return offset, block if share.owns(offset) else 0, mine


def consumed_blocks(entry: Mapping[str, Any], offset: int) -> int:
    """How many blocks of the message at `offset` a whole-partition entry counts as consumed (ALL: every one)."""
    _, cursor, block, skips = parse_entry(0, entry)
    return _status({0: (Share(0), cursor, block, skips)}, 1, offset)
