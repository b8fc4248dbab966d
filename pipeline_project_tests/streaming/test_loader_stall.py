"""Bounded mode: a partition that yields nothing before its end offset is a stall (a broker host cut off), waited
out up to `stall_timeout_s`, not the end of data after `idle_timeout_s`. Pure logic: a stand-in reader whose data
arrives late; the real broker cut is pipeline_project_tests/cluster/test_broker_faults.py."""

from __future__ import annotations

import logging
import threading
import time
from collections import deque

import numpy as np
import pytest

from pipeline_project.streaming.errors import ReadTimeoutError
from pipeline_project.streaming.load.assembler import Batch, BatchAssembler, End
from pipeline_project.streaming.load.partition_reader import BufferEntry
from pipeline_project.streaming.load.state import Cursor, Interleaver

SEQ_LEN = 4


class LateReader:
    """One partition whose only message (offset 0) arrives `after_s` seconds after the first fetch."""

    def __init__(self, after_s: float):
        self.partitions = (0,)
        self.buffers = {0: deque()}
        self.after_s = after_s
        self.first_fetch: float | None = None

    def fill(self, timeout: float) -> int:
        now = time.monotonic()
        self.first_fetch = self.first_fetch or now
        time.sleep(timeout)
        if now - self.first_fetch >= self.after_s:
            self.buffers[0].append(BufferEntry(0, np.arange(SEQ_LEN, dtype=np.uint32)[None, :]))
            return 1
        return 0

    def drained(self, p: int) -> None:
        pass


def _run(reader: LateReader, *, idle: float, stall: float) -> list:
    assembler = BatchAssembler(
        [reader], topic="t", batch_size=1, seq_len=SEQ_LEN, end_offsets={0: 1}, idle_timeout_s=idle,
        stall_timeout_s=stall, poll_timeout_s=0.01, trace=False, pin_memory=False,
        snapshot=lambda cursors, current: {"cursors": dict(cursors)}, stop=threading.Event(),
    )  # fmt: skip
    il = Interleaver({0: (0,)}, seed=0, rank=0)
    return list(assembler.run(il, {0: Cursor(0)}, None, {0}))


def test_a_stall_longer_than_idle_timeout_is_waited_out_and_logged(caplog):
    with caplog.at_level(logging.WARNING, logger="pipeline_project.streaming.load.assembler"):
        items = _run(LateReader(after_s=0.5), idle=0.1, stall=5.0)
    assert [type(i) for i in items] == [Batch, End]
    assert items[0].tensor.tolist() == [list(range(SEQ_LEN))]
    assert "t[0]: no data for 0s before the end offset 1; waiting for it" in caplog.text
    assert "t[0]: data again after a stall of" in caplog.text


def test_a_stall_past_stall_timeout_ends_in_a_clear_error():
    started = time.monotonic()
    with pytest.raises(ReadTimeoutError, match=r"t\[0\]: no data for \d+s \(stall_timeout_s\) before the end offset 1"):
        _run(LateReader(after_s=60.0), idle=0.1, stall=0.4)
    assert 0.4 <= time.monotonic() - started < 5


class SilentReader(LateReader):
    """Streaming mode: no data for `after_s` (then one message, then the log end); `eof` says whether the fetches
    meanwhile reach the log end (caught up) or not (the broker does not answer)."""

    def __init__(self, eof: bool, after_s: float = 60.0):
        super().__init__(after_s)
        self.at_end = {0} if eof else set()
        self.delivered = False

    def fill(self, timeout: float) -> int:
        if self.delivered:
            self.at_end = {0}
            time.sleep(timeout)
            return 0
        self.delivered = super().fill(timeout) > 0
        return int(self.delivered)


def _stream(reader, *, idle: float, stall: float) -> list:
    assembler = BatchAssembler(
        [reader], topic="t", batch_size=1, seq_len=SEQ_LEN, end_offsets=None, idle_timeout_s=idle,
        stall_timeout_s=stall, poll_timeout_s=0.01, trace=False, pin_memory=False,
        snapshot=lambda cursors, current: {"cursors": dict(cursors)}, stop=threading.Event(),
    )  # fmt: skip
    il = Interleaver({0: (0,)}, seed=0, rank=0)
    return list(assembler.run(il, {0: Cursor(0)}, None, {0}))


def test_streaming_mode_ends_after_idle_only_when_caught_up():
    started = time.monotonic()
    assert [type(i) for i in _stream(SilentReader(eof=True), idle=0.2, stall=30.0)] == [End]
    assert time.monotonic() - started < 5


def test_streaming_mode_waits_out_a_broker_stall_instead_of_ending_its_stream():
    """Issue 37: a streaming loader ended its stream after `idle_timeout_s` during a broker stall."""
    items = _stream(SilentReader(eof=False, after_s=0.6), idle=0.1, stall=10.0)
    assert [type(i) for i in items][:1] == [Batch]  # the data after the stall, not the end of the stream
    started = time.monotonic()
    with pytest.raises(ReadTimeoutError, match=r"t\[0\]: no data for \d+s \(stall_timeout_s\) before the log end"):
        _stream(SilentReader(eof=False), idle=0.1, stall=0.4)
    assert time.monotonic() - started < 5
