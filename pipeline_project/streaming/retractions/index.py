"""The retractions a loader honours, indexed by message: is block b of message (partition, offset) retracted?"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Protocol

from pipeline_project.streaming.retractions.model import BlockRange, Retraction

Retracted = tuple[int, int, int, str]  # partition, offset, block, the request that retracted it


class RetractedBlocks(Protocol):
    """The retractions a loader's assembler honours: a `RetractionIndex`, or the loader's refreshing `feed`."""

    def covers(self, partition: int, offset: int) -> bool: ...

    def request_of(self, partition: int, offset: int, block: int) -> str | None: ...


class RetractionIndex:
    """Every block range of the requests added so far. `request_of` answers per block; `covers` per message, so a
    message no request names costs one dict lookup."""

    def __init__(self, retractions: Iterable[Retraction] = ()) -> None:
        self._ranges: dict[tuple[int, int], list[tuple[BlockRange, str]]] = defaultdict(list)
        self.requests: dict[str, Retraction] = {}
        for retraction in retractions:
            self.add(retraction)

    def add(self, retraction: Retraction) -> bool:
        """Index `retraction`; False when its request was indexed already (a request is never changed)."""
        if retraction.request_id in self.requests:
            return False
        self.requests[retraction.request_id] = retraction
        for blocks in retraction.blocks:
            self._ranges[(blocks.partition, blocks.offset)].append((blocks, retraction.request_id))
        return True

    def covers(self, partition: int, offset: int) -> bool:
        return (partition, offset) in self._ranges

    def request_of(self, partition: int, offset: int, block: int) -> str | None:
        """The first request (in the order they were added) that retracts this block; None when none does."""
        for blocks, request in self._ranges.get((partition, offset), ()):
            if blocks.holds(block):
                return request
        return None

    def __len__(self) -> int:
        return len(self.requests)
