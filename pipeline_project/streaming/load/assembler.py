"""Partition buffers -> fixed-size int64 batches, in the deterministic interleave order of `state.py`.

`BatchAssembler.run` is a generator that the loader drives from its prefetch thread. It pulls
entries from the readers' buffers (`partition_reader.py`), fetching more when a buffer is empty,
and yields:

* `Batch`: exactly `batch_size` rows of `seq_len` tokens, with the loader state right after it;
  padding (`format.PAD_TOKEN`, only in messages whose header declares it) is -1 in the int64 rows;
* `End`, last: the data ran out. A short tail is never yielded; its blocks stay unconsumed, so
  `End.state` is None then (the position stays at the last batch). Without a pending block it
  holds the position after trailing transaction markers.

Both carry the dead letters (malformed messages skipped: the cursor moves past them) and the
deleted ranges skipped by `allow_data_loss` that were met while assembling them, so the loader
counts them when it delivers the item, not when it prefetches it. More than `dead_letter_budget`
dead letters in one run raise DeadLetterLimitError.

Bounded mode (end offsets given) follows the interleave over the live partitions regardless of
fetch timing. A partition that yields nothing before its end offset is stalled, not ended (a broker
host unreachable, a transaction holding the last stable offset back): after `idle_timeout_s` it is
logged and waited out, up to `stall_timeout_s` in all, then ReadTimeoutError. Streaming mode draws the next partition among those with data fetched,
and ends after `idle_timeout_s` without data. The generator returns without yielding once
`stop` is set.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from pipeline_project.streaming.errors import (
    DataLossError,
    DeadLetterLimitError,
    MalformedMessageError,
    ReadTimeoutError,
)
from pipeline_project.streaming.kafka.format import PAD_TOKEN
from pipeline_project.streaming.load.dead_letters import DeadLetter
from pipeline_project.streaming.load.partition_reader import BufferEntry, PartitionReader
from pipeline_project.streaming.load.preflight import SkippedRange
from pipeline_project.streaming.load.state import Cursor, Interleaver
from pipeline_project.streaming.retractions.index import Retracted, RetractedBlocks

log = logging.getLogger(__name__)

Snapshot = Callable[[Mapping[int, Cursor], int | None], dict[str, Any]]


@dataclass
class Batch:
    tensor: torch.Tensor
    state: dict[str, Any]
    trace: list[tuple[int, int, int]] | None
    pad_tokens: int = 0
    dead_letters: list[DeadLetter] = field(default_factory=list)
    skipped: list[SkippedRange] = field(default_factory=list)
    events: list[Any] = field(default_factory=list)  # mixture: domains that ran dry while assembling it
    retracted: list[Retracted] = field(default_factory=list)  # blocks passed over, retracted, on the way


@dataclass
class End:
    state: dict[str, Any] | None  # position after trailing transaction markers, if no block was pending
    dead_letters: list[DeadLetter] = field(default_factory=list)
    skipped: list[SkippedRange] = field(default_factory=list)
    events: list[Any] = field(default_factory=list)


@dataclass
class Pending:
    """The batch being assembled: its tensor (and numpy view), rows filled, and what was met on the way."""

    out: torch.Tensor
    arr: np.ndarray
    trace: list[tuple[int, int, int]] | None
    fill: int = 0
    pad: int = 0
    letters: list[DeadLetter] = field(default_factory=list)
    skipped: list[SkippedRange] = field(default_factory=list)
    budget: int | None = None  # dead letters still allowed in this run
    retracted: list[Retracted] = field(default_factory=list)


class Stream:
    """One interleaved stream of blocks: readers, the interleave, and its position (updated in place)."""

    def __init__(
        self,
        readers: Sequence[PartitionReader],
        il: Interleaver,
        cursors: dict[int, Cursor],
        current: int | None,
        live: set[int],
    ):
        self.readers = tuple(readers)
        self.reader_of = {p: r for r in self.readers for p in r.partitions}
        self.il = il
        self.cursors = cursors
        self.current = current
        self.live = live


class BatchAssembler:
    """Builds batches from `readers`' buffers; `snapshot(cursors, current)` makes the loader state."""

    def __init__(
        self,
        readers: Sequence[PartitionReader],
        *,
        topic: str,
        batch_size: int,
        seq_len: int,
        end_offsets: Mapping[int, int] | None,
        idle_timeout_s: float,
        poll_timeout_s: float,
        trace: bool,
        pin_memory: bool,
        snapshot: Snapshot,
        stop: threading.Event,
        allow_data_loss: bool = False,
        stall_timeout_s: float = 300.0,
        retractions: RetractedBlocks | None = None,
    ):
        self.readers = tuple(readers)
        self.retractions = retractions
        self.topic = topic
        self.batch_size = batch_size
        self.seq_len = seq_len
        self.end_offsets = dict(end_offsets) if end_offsets is not None else None  # None: streaming mode
        self.idle_timeout_s = idle_timeout_s
        self.stall_timeout_s = stall_timeout_s
        self.poll_timeout_s = poll_timeout_s
        self.trace = trace
        self.pin_memory = pin_memory
        self.snapshot = snapshot
        self.stop = stop
        self.allow_data_loss = allow_data_loss

    def run(
        self,
        il: Interleaver,
        cursors: dict[int, Cursor],
        current: int | None,
        live: set[int],
        dead_letter_budget: int | None = None,
    ) -> Iterator[Batch | End]:
        """Batches from position (`cursors`, `current`) over the `live` partitions; updates both in place."""
        stream = Stream(self.readers, il, cursors, current, live)
        budget = dead_letter_budget
        while not self.stop.is_set():
            acc = self._new_batch(budget)
            while acc.fill < self.batch_size:
                n = self.take(stream, acc, self.batch_size - acc.fill)
                if n is None:
                    return
                if n == 0:
                    yield self._end(acc.fill, stream.cursors, stream.current, acc.letters, acc.skipped)
                    return
            if budget is not None:
                budget -= len(acc.letters)
            yield Batch(
                acc.out,
                self.snapshot(stream.cursors, stream.current),
                acc.trace,
                acc.pad,
                acc.letters,
                acc.skipped,
                retracted=acc.retracted,
            )

    def _new_batch(self, budget: int | None) -> Pending:
        out = torch.empty((self.batch_size, self.seq_len), dtype=torch.int64, pin_memory=self.pin_memory)
        return Pending(out, out.numpy(), [] if self.trace else None, budget=budget)

    def take(self, s: Stream, acc: Pending, want: int) -> int | None:
        """Copy up to `want` blocks of `s`'s next message into `acc`; the blocks copied (>= 1), 0 when the stream
        ended (bounded: no live partition left; streaming: `idle_timeout_s` without data), None when stopped."""
        while True:
            if self.stop.is_set():
                return None
            if s.current is None and not self._next_partition(s):
                return 0
            p = s.current
            reader = s.reader_of[p]
            buf = reader.buffers[p]
            if not buf and not self._wait_for(reader, p):
                return 0  # streaming mode only: idle timeout
            head = buf[0]
            if head.error is not None:
                buf.popleft()
                self._skip_error(s, acc, p, head)
            elif head.blocks is None:  # position marker: end of partition / transaction markers / another domain
                buf.popleft()
                self._pass_marker(s, p, head.offset)
            elif head.offset < s.cursors[p].offset:  # before the resume point (cannot happen after a seek)
                buf.popleft()
            elif self.retractions is not None and self.retractions.covers(p, head.offset):
                copied = self._copy_unretracted(s, acc, p, head, want)
                if copied:
                    return copied  # else every block left of the message was retracted: on to the next
            else:
                return self._copy(s, acc, p, head, want)

    def _next_partition(self, s: Stream) -> bool:
        """Set `s.current` to the interleave's next partition; False when the stream ended."""
        if self.end_offsets is not None:
            s.current = s.il.next_partition(s.live)
            return s.current is not None
        ready = self._wait_ready(s.live, s.readers)
        if ready is None:
            return False
        s.current = s.il.next_partition(ready)
        return True

    def _skip_error(self, s: Stream, acc: Pending, p: int, head: BufferEntry) -> None:
        """A malformed message becomes a dead letter, deleted records (allow_data_loss) a skipped range; else raise."""
        if isinstance(head.error, MalformedMessageError):
            acc.letters.append(self._dead_letter(head))
            if acc.budget is not None and len(acc.letters) > acc.budget:
                raise DeadLetterLimitError(
                    f"more than {acc.budget} malformed messages in {self.topic} (max_dead_letters);"
                    f" the last: {head.error}"
                ) from head.error
            after = head.offset + 1
        elif isinstance(head.error, DataLossError) and self.allow_data_loss:
            acc.skipped.append(SkippedRange(p, s.cursors[p].offset, head.offset))
            after = head.offset
        else:
            raise head.error
        self._finish_message(s, p, after)

    def _pass_marker(self, s: Stream, p: int, offset: int) -> None:
        if offset > s.cursors[p].offset:
            s.cursors[p] = Cursor(offset)
        if self.end_offsets is not None and s.cursors[p].offset >= self.end_offsets[p]:
            s.live.discard(p)
            s.current = None
        elif self.end_offsets is None:
            s.current = None
        s.reader_of[p].drained(p)

    def _copy(self, s: Stream, acc: Pending, p: int, head: BufferEntry, want: int) -> int:
        """Copy up to `want` of `head`'s blocks from the cursor on into `acc` (padding as -1); the blocks copied."""
        c = s.cursors[p]
        first = max(c.block if head.offset == c.offset else 0, head.first)  # head.first: stripes.Skips
        n = head.blocks.shape[0]
        take = min(n - first, want)
        seg = acc.arr[acc.fill : acc.fill + take]
        seg[:] = head.blocks[first : first + take]
        if head.pad_tokens:
            mask = seg == PAD_TOKEN
            acc.pad += int(np.count_nonzero(mask))
            seg[mask] = -1
        if acc.trace is not None:
            acc.trace.extend((p, head.offset, b) for b in range(first, first + take))
        acc.fill += take
        if first + take == n:
            s.reader_of[p].buffers[p].popleft()
            self._finish_message(s, p, head.offset + 1)
        else:
            s.cursors[p] = Cursor(head.offset, first + take)
        return take

    def _copy_unretracted(self, s: Stream, acc: Pending, p: int, head: BufferEntry, want: int) -> int:
        """`_copy` for a message some retraction names: block by block, a retracted block is passed over (the
        cursor moves past it, `acc.retracted` records it) instead of copied. May copy none."""
        c = s.cursors[p]
        block = max(c.block if head.offset == c.offset else 0, head.first)
        n, copied = head.blocks.shape[0], 0
        while block < n and copied < want:
            request = self.retractions.request_of(p, head.offset, block)
            if request is not None:
                acc.retracted.append((p, head.offset, block, request))
            else:
                row = acc.arr[acc.fill : acc.fill + 1]
                row[:] = head.blocks[block : block + 1]
                if head.pad_tokens:
                    mask = row == PAD_TOKEN
                    acc.pad += int(np.count_nonzero(mask))
                    row[mask] = -1
                if acc.trace is not None:
                    acc.trace.append((p, head.offset, block))
                acc.fill += 1
                copied += 1
            block += 1
        if block == n:
            s.reader_of[p].buffers[p].popleft()
            self._finish_message(s, p, head.offset + 1)
        else:
            s.cursors[p] = Cursor(head.offset, block)
        return copied

    def _finish_message(self, s: Stream, p: int, after: int) -> None:
        """Partition p's cursor moves to `after`, the next message drawn; p ends at its end offset (bounded)."""
        s.cursors[p] = Cursor(after)
        s.current = None
        if self.end_offsets is not None and after >= self.end_offsets[p]:
            s.live.discard(p)
        s.reader_of[p].drained(p)

    def _end(
        self,
        fill: int,
        cursors: Mapping[int, Cursor],
        current: int | None,
        letters: list[DeadLetter],
        skipped: list[SkippedRange],
    ) -> End:
        # a dropped short batch keeps its blocks unconsumed: the state stays at the last batch
        return End(self.snapshot(cursors, current) if fill == 0 else None, letters, skipped)

    def _dead_letter(self, head: BufferEntry) -> DeadLetter:
        err = head.error
        value, headers = head.raw or (None, None)
        return DeadLetter(err.topic, err.partition, err.offset, err.problem, value=value, headers=headers)

    def _wait_for(self, reader: PartitionReader, p: int) -> bool:
        """Fetch until partition p has an entry. No data for `idle_timeout_s` is the end of the stream only in
        streaming mode with p caught up (its last fetch ended at the log end); otherwise it is a stall (a broker
        unreachable, the end offset not reached): logged, waited out up to `stall_timeout_s`, then
        ReadTimeoutError."""
        started = time.monotonic()
        warned = False
        buf = reader.buffers[p]
        while not buf:
            if self.stop.is_set():
                return False
            reader.fill(self.poll_timeout_s)
            waited = time.monotonic() - started
            if buf or waited <= self.idle_timeout_s:
                continue
            if self.end_offsets is None and p in _caught_up([reader]):
                return False
            self._stalled(waited, [p])
            if not warned:
                warned = True
                self._warn_stall(p, waited)
        if warned:
            log.warning("%s[%d]: data again after a stall of %.0fs", self.topic, p, time.monotonic() - started)
        return True

    def _stalled(self, waited: float, partitions: Sequence[int]) -> None:
        if waited <= self.stall_timeout_s:
            return
        which = ", ".join(map(str, partitions))
        if self.end_offsets:
            where = f"the end offset {', '.join(str(self.end_offsets[p]) for p in partitions)} captured at start"
        else:
            where = "the log end"
        raise ReadTimeoutError(
            f"{self.topic}[{which}]: no data for {waited:.0f}s (stall_timeout_s) before {where} "
            "(brokers unreachable, or records deleted?)"
        )

    def _warn_stall(self, p: int, waited: float) -> None:
        end = f"the end offset {self.end_offsets[p]}" if self.end_offsets else "its log end"
        text = "%s[%d]: no data for %.0fs before %s; waiting for it (a broker unreachable?), up to stall_timeout_s=%gs"
        log.warning(text, self.topic, p, waited, end, self.stall_timeout_s)

    def _wait_ready(self, live: set[int], readers: Sequence[PartitionReader]) -> set[int] | None:
        """Streaming: partitions with fetched entries; None after `idle_timeout_s` without any, once every live
        partition is caught up (its last fetch ended at the log end). Partitions behind are a stall: waited out up
        to `stall_timeout_s`, then ReadTimeoutError (a streaming loader does not end its stream on a broker cut)."""
        started, warned = time.monotonic(), False
        while not self.stop.is_set():
            ready = {p for r in readers for p, b in r.buffers.items() if b and p in live}
            if ready:
                if warned:
                    log.warning("%s: data again after a stall of %.0fs", self.topic, time.monotonic() - started)
                return ready
            waited = time.monotonic() - started
            if waited > self.idle_timeout_s:
                behind = sorted(live - _caught_up(readers))
                if not behind:
                    return None
                self._stalled(waited, behind)
                if not warned:
                    warned = True
                    self._warn_stall(behind[0], waited)
            for r in readers:
                r.fill(self.poll_timeout_s / len(readers))
        return None


def _caught_up(readers: Sequence[PartitionReader]) -> set[int]:
    """The partitions whose last fetch ended at the log end (a reader that does not say: all of its own)."""
    return {p for r in readers for p in (getattr(r, "at_end", None) if hasattr(r, "at_end") else r.partitions)}
