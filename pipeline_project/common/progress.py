"""Rate and ETA of long work for log lines (the trainer's steps; the CLI draws bars with rich instead).

`RateEta` follows work toward a known total (`done` out of `total`) or a backlog that shrinks as it is worked
off (`remaining`, such as a consumer's lag): the rate is measured since the first update, and the ETA is what
is left over that rate. Pure Python, no I/O; the clock is injectable for tests.
"""

from __future__ import annotations

import time
from collections.abc import Callable


def format_duration(seconds: float) -> str:
    """12 s, 3 min 20 s, 2 h 05 min."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


class RateEta:
    """Rate (units per second) and ETA of one piece of work, measured from the first `update`."""

    def __init__(
        self,
        unit: str,
        total: int | None = None,
        backlog_unit: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.unit = unit
        self.total = total
        self.backlog_unit = backlog_unit or unit  # what `remaining` counts (a consumer's lag: messages)
        self.clock = clock
        self._start: tuple[float, float, float | None] | None = None  # (time, done, remaining) at the first update

    def update(self, done: float, remaining: float | None = None) -> str:
        """'12/40 steps, 3.1 steps/s, ETA 9 s' (with `total`), '12 steps, 3.1 steps/s, 80 messages left, ETA 26 s' (with a
        shrinking `remaining`, whose own rate of decrease sets the ETA), or just the count and rate."""
        now = self.clock()
        if self._start is None:
            self._start = (now, done, remaining)
        t0, done0, remaining0 = self._start
        elapsed = now - t0
        rate = (done - done0) / elapsed if elapsed > 0 else 0.0
        count = f"{done:.0f}/{self.total} {self.unit}" if self.total else f"{done:.0f} {self.unit}"
        text = f"{count}, {rate:.2f} {self.unit}/s" if elapsed > 0 else count
        eta = None
        if self.total and rate > 0:
            eta = (self.total - done) / rate
        elif remaining is not None and remaining0 is not None and elapsed > 0:
            shrink = (remaining0 - remaining) / elapsed
            text += f", {remaining:.0f} {self.backlog_unit} left"
            eta = remaining / shrink if shrink > 0 else None
        return text + (f", ETA {format_duration(eta)}" if eta is not None else "")
