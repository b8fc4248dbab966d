"""The retractions a running loader honours: the topic read at the loader's start, then again every `refresh_s`
when its assembler next asks, so a request reaches every rank within `refresh_s` plus the batches prefetched."""

from __future__ import annotations

import time
from collections.abc import Callable

from pipeline_project.streaming.retractions.topic import RetractionReader


class RetractionFeed:
    def __init__(self, reader: RetractionReader, refresh_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.reader = reader
        self.refresh_s = refresh_s
        self.clock = clock
        self.reader.read_to_end()
        self._next = clock() + refresh_s

    def covers(self, partition: int, offset: int) -> bool:
        if self.clock() >= self._next:
            self.reader.read_to_end()
            self._next = self.clock() + self.refresh_s
        return self.reader.index.covers(partition, offset)

    def request_of(self, partition: int, offset: int, block: int) -> str | None:
        return self.reader.index.request_of(partition, offset, block)

    def close(self) -> None:
        self.reader.close()
