"""How the objects one tick lists become batches: in listing order, each batch closed by its limits, up to
`max_batches` batches, and no new batch opened past the tick's deadline."""

from __future__ import annotations

import time
from collections.abc import Callable

from pipeline_project.ingest.listing.cursor import Limits
from pipeline_project.ingest.manifest import RawObject


class Packer:
    """The objects a tick takes, in the order the listings take them, cut into batches as they come.

    A batch closes at `limits.max_objects` objects or before the object that would take it past
    `limits.max_bytes` (one object larger than that gets a batch of its own). A new batch opens only while fewer
    than `limits.max_batches` are open and the clock is before `deadline`. `add` answers False when the object
    does not fit, and the listing that asked stops there, its position just before that object: so the cursor
    a listing leaves covers exactly the objects in `batches`. The cut depends only on the objects and their
    order, so a tick that lists the same objects again cuts the same batches (and names them the same).
    """

    def __init__(self, limits: Limits, deadline: float | None = None, clock: Callable[[], float] = time.monotonic):
        self.limits = limits
        self.deadline = deadline
        self.clock = clock
        self.batches: list[list[RawObject]] = []
        self.taken: list[RawObject] = []  # every object of `batches`, in order
        self.stopped_by: str | None = None  # why the last refused object was refused: "batches" or "time"
        self._bytes = 0  # of the last batch

    def _fits_last(self, obj: RawObject) -> bool:
        last = self.batches[-1]
        return len(last) < self.limits.max_objects and self._bytes + obj.size <= self.limits.max_bytes

    def _can_open(self) -> bool:
        if len(self.batches) >= self.limits.max_batches:
            self.stopped_by = "batches"
            return False
        if self.batches and self.deadline is not None and self.clock() >= self.deadline:
            self.stopped_by = "time"
            return False
        return True

    def add(self, obj: RawObject) -> bool:
        """Take `obj` into the last batch or a new one; False (nothing taken) when neither may take it."""
        if self.batches and self._fits_last(obj):
            self.batches[-1].append(obj)
            self._bytes += obj.size
        elif self._can_open():
            self.batches.append([obj])
            self._bytes = obj.size
        else:
            return False
        self.taken.append(obj)
        return True

    @property
    def full(self) -> bool:
        """No object could join: the last batch is at max_objects and no other may open."""
        return bool(self.batches) and len(self.batches[-1]) >= self.limits.max_objects and not self._can_open()

    def __len__(self) -> int:
        return len(self.taken)
