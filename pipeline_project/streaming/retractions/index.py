"""The retractions a loader honours, indexed by message: is block b of message (partition, offset) retracted?"""

from __future__ import annotations

import heapq
from array import array
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Iterable
from typing import Protocol

from pipeline_project.streaming.retractions.model import BlockRange, Retraction, ordered

Retracted = tuple[int, int, int, str]  # partition, offset, block, the request that retracted it


class RetractedBlocks(Protocol):
    """The retractions a loader's assembler honours: a `RetractionIndex`, or the loader's refreshing `feed`."""

    def covers(self, partition: int, offset: int) -> bool: ...

    def request_of(self, partition: int, offset: int, block: int) -> str | None: ...


class Runs:
    """One partition's whole-message ranges as disjoint, sorted intervals, each owned by the earliest-added range
    that covers it: a lookup is one bisection, and memory is ~20 bytes an interval however many messages it spans.
    Built again (a sweep, O(n log n)) on the first lookup after an add."""

    def __init__(self) -> None:
        self._added: list[tuple[int, int, int]] = []  # (first, last, order), inclusive
        self._starts, self._ends, self._owners = array("q"), array("q"), array("q")
        self._dirty = False

    def add(self, first: int, last: int, order: int) -> None:
        self._added.append((first, last, order))
        self._dirty = True

    def owner(self, offset: int) -> int | None:
        """The order of the earliest-added range holding `offset`, or None."""
        if self._dirty:
            self._build()
        i = bisect_right(self._starts, offset) - 1
        return self._owners[i] if i >= 0 and offset <= self._ends[i] else None

    def _build(self) -> None:
        """Sweep the ranges' ends in offset order with a heap of the open ranges by order: each stretch between two
        ends belongs to the earliest open one."""
        events = sorted({x for first, last, _ in self._added for x in (first, last + 1)})
        by_first = sorted(self._added)
        starts, ends, owners = array("q"), array("q"), array("q")
        heap: list[tuple[int, int]] = []  # (order, last)
        j = 0
        for k, at in enumerate(events[:-1]):
            while j < len(by_first) and by_first[j][0] <= at:
                heapq.heappush(heap, (by_first[j][2], by_first[j][1]))
                j += 1
            while heap and heap[0][1] < at:
                heapq.heappop(heap)
            if not heap:
                continue
            order, stop = heap[0][0], events[k + 1] - 1
            if owners and owners[-1] == order and ends[-1] == at - 1:
                ends[-1] = stop
            else:
                starts.append(at), ends.append(stop), owners.append(order)
        self._starts, self._ends, self._owners, self._dirty = starts, ends, owners, False

    def __len__(self) -> int:
        if self._dirty:
            self._build()
        return len(self._starts)


class RetractionIndex:
    """Every block range of the requests added so far. Whole messages (one or a run) are intervals per partition
    (`Runs`); ranges of some blocks of a message are kept per message. `request_of` answers per block, the
    earliest-added request first; `covers` per message."""

    def __init__(self, retractions: Iterable[Retraction] = ()) -> None:
        self._partial: dict[tuple[int, int], list[tuple[int, BlockRange]]] = defaultdict(list)
        self._runs: dict[int, Runs] = defaultdict(Runs)
        self._order: list[str] = []  # the request of each added record, by order
        self.requests: dict[str, Retraction] = {}  # every request, its parts read so far merged
        self._parts: dict[str, set[int]] = {}
        for retraction in retractions:
            self.add(retraction)

    def add(self, retraction: Retraction) -> bool:
        """Index `retraction` (a request, or one part of one); False when that part was indexed already (a request
        is never changed)."""
        request = retraction.request_id
        seen = self._parts.setdefault(request, set())
        if retraction.part in seen:
            return False
        seen.add(retraction.part)
        held = self.requests.get(request)
        if held is None:
            self.requests[request] = retraction.model_copy(update={"blocks": ordered(retraction.blocks)})
        else:
            self.requests[request] = held.model_copy(update={"blocks": ordered([*held.blocks, *retraction.blocks])})
        order = len(self._order)
        self._order.append(request)
        for blocks in retraction.blocks:
            if blocks.whole:
                self._runs[blocks.partition].add(blocks.offset, blocks.last, order)
            else:
                self._partial[(blocks.partition, blocks.offset)].append((order, blocks))
        return True

    def parts_of(self, request: str) -> frozenset[int]:
        """The parts of `request` indexed so far."""
        return frozenset(self._parts.get(request, ()))

    def covers(self, partition: int, offset: int) -> bool:
        if (partition, offset) in self._partial:
            return True
        runs = self._runs.get(partition)
        return runs is not None and runs.owner(offset) is not None

    def request_of(self, partition: int, offset: int, block: int) -> str | None:
        """The first request (in the order they were added) that retracts this block; None when none does."""
        runs = self._runs.get(partition)
        whole = runs.owner(offset) if runs is not None else None
        orders = [order for order, blocks in self._partial.get((partition, offset), ()) if blocks.holds(block)]
        if whole is not None:
            orders.append(whole)
        return self._order[min(orders)] if orders else None

    def __len__(self) -> int:
        return len(self.requests)
