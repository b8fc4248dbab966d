"""Kafka topic of token blocks -> ready `torch.LongTensor` batches, with exact resume and DDP.

Usage (the trainer's contract)::

    cfg = LoaderConfig(kafka=KafkaSettings(bootstrap_servers=...), topic="token-blocks",
                       seq_len=256, batch_size=8, rank=0, world_size=1)
    loader = KafkaBlockLoader(cfg)
    for batch in loader:            # int64 [batch_size, seq_len]
        ...
        ckpt["loader"] = loader.state_dict()
    loader.close()

Behaviour worth knowing:

* Partitions are assigned with `assign()` (see `assignment.py`); the rank reads them through
  `num_workers` in-process consumers, interleaved deterministically (see `state.py`).
* Bounded mode stops at the read_committed end offsets (last stable offsets) captured when the
  loader is built, or at `end_offsets`. Streaming mode keeps reading and stops after
  `idle_timeout_s` without new data.
* The last short batch is dropped: every batch has exactly `batch_size` rows, so DDP ranks
  never see ragged shapes. Its blocks stay unconsumed in `state_dict()`.
* In bounded mode the block order is a function of topic contents, seed and layout only;
  a resumed run delivers exactly the (partition, offset, block) sequence of an uninterrupted
  one. In streaming mode the next partition is drawn among those with data already fetched,
  so the order follows arrival; positions are still exact (nothing lost or repeated).
* Ranks may hold different numbers of blocks; a DDP trainer must agree on the step count
  (for example all-reduce a "has batch" flag) — the loader does not pad.
* Under DDP every rank saves its own `state_dict()`; `gather_state()` collects them all on
  every rank, and `load_state_dict()` accepts either this rank's state or that list.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch
from confluent_kafka import Consumer, IsolationLevel, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import OffsetSpec
from pydantic import BaseModel, ConfigDict, Field, model_validator

from pipeline_project.streaming.assignment import partitions_for_rank
from pipeline_project.streaming.format import MalformedMessageError, decode_message
from pipeline_project.streaming.kafka_client import KafkaSettings
from pipeline_project.streaming.state import (
    Cursor,
    Interleaver,
    StateError,
    make_state,
    merge_states,
    parse_cursors,
    same_layout,
)

log = logging.getLogger(__name__)

__all__ = ["KafkaBlockLoader", "LoaderConfig", "MalformedMessageError", "StateError", "gather_state"]


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    return int(value) if value else default


class LoaderConfig(BaseModel):
    """Everything the loader needs; rank and world_size default to torchrun's RANK / WORLD_SIZE."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    config_version: Literal[1] = 1
    kafka: KafkaSettings
    topic: str = "token-blocks"
    seq_len: int = Field(gt=0)
    batch_size: int = Field(gt=0)
    rank: int = Field(default_factory=lambda: _env_int("RANK", 0), ge=0)
    world_size: int = Field(default_factory=lambda: _env_int("WORLD_SIZE", 1), ge=1)
    num_workers: int = Field(default=1, ge=1)
    mode: Literal["bounded", "streaming"] = "bounded"
    idle_timeout_s: float = Field(default=10.0, gt=0)
    seed: int = 0
    start_offsets: dict[int, int] | None = None
    end_offsets: dict[int, int] | None = None
    expected_tokenizer_hash: str | None = None
    device: str = "cpu"
    pin_memory: bool | None = None
    prefetch: int = Field(default=2, ge=1)
    # messages per consume() call and its timeout
    consume_messages: int = Field(default=1024, ge=1)
    poll_timeout_s: float = Field(default=0.05, gt=0)
    # a partition whose fetched-but-undelivered messages exceed this is paused until it drains
    max_buffered_messages: int = Field(default=2048, ge=2)
    metadata_timeout_s: float = Field(default=30.0, gt=0)
    # record (partition, offset, block_index) of every delivered block in `loader.trace`
    trace: bool = False

    @model_validator(mode="after")
    def _rank_in_world(self) -> LoaderConfig:
        if self.rank >= self.world_size:
            raise ValueError(f"rank {self.rank} must be < world_size {self.world_size}")
        return self


@dataclass
class _Message:
    offset: int
    blocks: np.ndarray | None = None  # (n, seq_len) uint32; None for a position marker
    error: BaseException | None = None


class _Reader:
    """One worker: its own consumer over its partitions, demultiplexed into per-partition queues."""

    def __init__(self, loader: KafkaBlockLoader, worker: int, partitions: Sequence[int]):
        self.loader = loader
        self.worker = worker
        self.partitions = tuple(partitions)
        self.buffers: dict[int, deque[_Message]] = {p: deque() for p in self.partitions}
        self.paused: set[int] = set()
        self.ended: set[int] = set()  # bounded mode: reached the end offset, paused for good
        self.consumer: Consumer | None = None

    def open(self, cursors: Mapping[int, Cursor], live: set[int]) -> None:
        cfg = self.loader.cfg
        self.consumer = cfg.kafka.make_consumer(
            overrides={"enable.partition.eof": True, "client.id": f"{cfg.kafka.client_id}.r{cfg.rank}w{self.worker}"}
        )
        self.consumer.assign([TopicPartition(cfg.topic, p, cursors[p].offset) for p in self.partitions if p in live])

    def high_watermarks(self) -> dict[int, int]:
        """Log end offsets as last seen by fetches (cached: no network round trip)."""
        out = {}
        if self.consumer is not None:
            for p in self.partitions:
                try:
                    _, high = self.consumer.get_watermark_offsets(TopicPartition(self.loader.cfg.topic, p), cached=True)
                except KafkaException:
                    continue
                if high is not None and high >= 0:
                    out[p] = int(high)
        return out

    def close(self) -> None:
        if self.consumer is not None:
            self.loader._high.update(self.high_watermarks())
            self.consumer.close()
            self.consumer = None
        for b in self.buffers.values():
            b.clear()
        self.paused.clear()
        self.ended.clear()

    def fill(self, timeout: float) -> int:
        """One consume() call; returns how many entries were queued."""
        cfg = self.loader.cfg
        ends = self.loader._end_offsets
        msgs = self.consumer.consume(num_messages=cfg.consume_messages, timeout=timeout)
        for msg in msgs:
            p = msg.partition()
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    # everything before msg.offset() is consumed or a transaction marker
                    self.buffers[p].append(_Message(msg.offset()))
                elif err.fatal() or not err.retriable():
                    raise KafkaException(err)
                else:
                    log.warning("kafka consumer (worker %d): %s", self.worker, err.str())
                continue
            offset = msg.offset()
            if ends is not None and offset >= ends[p]:
                if p not in self.ended:
                    self.buffers[p].append(_Message(ends[p]))
                    self.ended.add(p)
                    self._pause(p)
                continue
            try:
                blocks = decode_message(
                    msg.value(),
                    msg.headers(),
                    topic=cfg.topic,
                    partition=p,
                    offset=offset,
                    expected_seq_len=cfg.seq_len,
                    expected_tokenizer_hash=cfg.expected_tokenizer_hash,
                )
                self.buffers[p].append(_Message(offset, blocks))
            except MalformedMessageError as exc:
                self.buffers[p].append(_Message(offset, error=exc))
            if len(self.buffers[p]) >= cfg.max_buffered_messages:
                self._pause(p)
        return len(msgs)

    def _pause(self, p: int) -> None:
        if p not in self.paused:
            self.consumer.pause([TopicPartition(self.loader.cfg.topic, p)])
            self.paused.add(p)

    def drained(self, p: int) -> None:
        """Resume a partition paused for a full buffer once half of it is delivered."""
        if (
            p in self.paused
            and p not in self.ended
            and len(self.buffers[p]) <= self.loader.cfg.max_buffered_messages // 2
        ):
            self.consumer.resume([TopicPartition(self.loader.cfg.topic, p)])
            self.paused.discard(p)


@dataclass
class _Batch:
    tensor: torch.Tensor
    state: dict[str, Any]
    trace: list[tuple[int, int, int]] | None


@dataclass
class _End:
    state: dict[str, Any] | None  # position after trailing transaction markers, if no block was pending


class KafkaBlockLoader:
    """Iterable of `torch.LongTensor [batch_size, seq_len]` read from a Kafka topic of token blocks."""

    def __init__(self, cfg: LoaderConfig):
        self.cfg = cfg
        admin = cfg.kafka.make_admin()
        md = admin.list_topics(topic=cfg.topic, timeout=cfg.metadata_timeout_s).topics.get(cfg.topic)
        if md is None or md.error is not None or not md.partitions:
            problem = md.error.str() if md is not None and md.error is not None else "no partitions"
            raise ValueError(f"topic {cfg.topic!r} is not readable: {problem}")
        self.all_partitions = tuple(sorted(md.partitions))
        self.workers = partitions_for_rank(
            self.all_partitions, rank=cfg.rank, world_size=cfg.world_size, num_workers=cfg.num_workers
        )
        self.partitions = tuple(sorted(p for ps in self.workers.values() for p in ps))
        self.pin = cfg.pin_memory if cfg.pin_memory is not None else torch.cuda.is_available()

        earliest = _list_offsets(admin, cfg.topic, self.partitions, OffsetSpec.earliest(), cfg.metadata_timeout_s)
        self._end_offsets: dict[int, int] | None = None
        if cfg.mode == "bounded":
            if cfg.end_offsets is not None:
                self._end_offsets = {p: int(cfg.end_offsets[p]) for p in self.partitions}
            else:
                self._end_offsets = _list_offsets(
                    admin, cfg.topic, self.partitions, OffsetSpec.latest(), cfg.metadata_timeout_s
                )
        start = dict(earliest)
        for p, off in (cfg.start_offsets or {}).items():
            if p in start:
                start[p] = int(off)
        self._start_cursors = {p: Cursor(start[p]) for p in self.partitions}

        self._readers = [_Reader(self, w, ps) for w, ps in self.workers.items()]
        self._reader_of = {p: r for r in self._readers for p in r.partitions}
        self._interleaver = Interleaver(self.workers, seed=cfg.seed, rank=cfg.rank)
        self._cursors = dict(self._start_cursors)  # position after the last yielded batch
        self._current: int | None = None
        self._delivered_state = self._snapshot(self._cursors, None)

        self._thread: threading.Thread | None = None
        self._queue: queue.Queue | None = None
        self._stop = threading.Event()
        self._finished = False
        self.trace: list[tuple[int, int, int]] = []

        self._wait_total = 0.0
        self._wait_window = 0.0
        self._window_start = time.perf_counter()
        self.last_wait_s = 0.0
        self.blocks_delivered = 0
        self._high: dict[int, int] = {}

    # -- public API ---------------------------------------------------------------------------

    def __iter__(self) -> Iterator[torch.Tensor]:
        if self._thread is None and not self._finished:
            self._start()
        return self

    def __next__(self) -> torch.Tensor:
        if self._finished:
            raise StopIteration
        if self._thread is None:
            self._start()
        t0 = time.perf_counter()
        item = self._queue.get()
        waited = time.perf_counter() - t0
        self.last_wait_s = waited
        self._wait_total += waited
        self._wait_window += waited
        if isinstance(item, _End):
            if item.state is not None:
                self._delivered_state = item.state
            self._finished = True
            self._join()
            raise StopIteration
        if isinstance(item, BaseException):
            self._finished = True
            self._join()
            raise item
        self._delivered_state = item.state
        self.blocks_delivered += self.cfg.batch_size
        if item.trace is not None:
            self.trace.extend(item.trace)
        tensor = item.tensor
        if self.cfg.device != "cpu":
            tensor = tensor.to(self.cfg.device, non_blocking=self.pin)
        return tensor

    def state_dict(self) -> dict[str, Any]:
        """Position after the last batch returned by `__next__` (prefetched batches are not counted)."""
        state = dict(self._delivered_state)
        state["partitions"] = {k: dict(v) for k, v in state["partitions"].items()}
        return state

    def load_state_dict(self, state: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> None:
        """Seek to a saved position: this rank's state, every rank's states, or a merged state.

        With the same rank/layout/seed the interleave continues exactly; otherwise the
        per-partition cursors are taken and the interleave restarts from the seed.
        """
        cfg = self.cfg
        if not isinstance(state, Mapping):
            states = list(state)
            mine = [s for s in states if s.get("rank") == cfg.rank and s.get("world_size") == cfg.world_size]
            state = mine[0] if len(mine) == 1 and len(states) == cfg.world_size else merge_states(states)
        cursors = parse_cursors(state, topic=cfg.topic)
        missing = [p for p in self.partitions if p not in cursors]
        if missing and state.get("rank") is not None:
            raise StateError(f"state has no cursor for partitions {missing} of rank {cfg.rank}")
        self._stop_prefetch()
        self._cursors = {p: cursors.get(p, self._start_cursors[p]) for p in self.partitions}
        if same_layout(state, rank=cfg.rank, world_size=cfg.world_size, num_workers=cfg.num_workers, seed=cfg.seed):
            self._interleaver.set_state(state["interleave"])
            self._current = state.get("current")
        else:
            self._interleaver = Interleaver(self.workers, seed=cfg.seed, rank=cfg.rank)
            self._current = None
        self._delivered_state = self._snapshot(self._cursors, self._current)
        self._finished = False

    def metrics(self) -> dict[str, Any]:
        """Wait and lag figures; `data_wait_fraction` covers the wall time since the previous call."""
        now = time.perf_counter()
        wall = now - self._window_start
        fraction = self._wait_window / wall if wall > 0 else 0.0
        self._wait_window = 0.0
        self._window_start = now
        lag = self._lag()
        return {
            "data_wait_s_total": self._wait_total,
            "data_wait_s_last": self.last_wait_s,
            "data_wait_fraction": fraction,
            "lag": lag,
            "lag_total": sum(lag.values()),
            "blocks_delivered": self.blocks_delivered,
            "tokens_delivered": self.blocks_delivered * self.cfg.seq_len,
        }

    @property
    def end_offsets(self) -> dict[int, int] | None:
        return dict(self._end_offsets) if self._end_offsets is not None else None

    def close(self) -> None:
        self._stop_prefetch()

    def __enter__(self) -> KafkaBlockLoader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals ----------------------------------------------------------------------------

    def _snapshot(self, cursors: Mapping[int, Cursor], current: int | None) -> dict[str, Any]:
        cfg = self.cfg
        return make_state(
            topic=cfg.topic,
            rank=cfg.rank,
            world_size=cfg.world_size,
            num_workers=cfg.num_workers,
            seed=cfg.seed,
            cursors=cursors,
            current=current,
            interleave=self._interleaver.get_state(),
        )

    def _lag(self) -> dict[int, int]:
        """Log end (last fetched high watermark, else the start-time end offset) minus delivered position."""
        for r in self._readers:
            self._high.update(r.high_watermarks())
        cursors = self._delivered_state["partitions"]
        lag = {}
        for p in self.partitions:
            pos = int(cursors[str(p)]["offset"])
            high = self._high.get(p, (self._end_offsets or {}).get(p, pos))
            lag[p] = max(0, high - pos)
        return lag

    def _live(self, cursors: Mapping[int, Cursor]) -> set[int]:
        if self._end_offsets is None:
            return set(self.partitions)
        return {p for p in self.partitions if cursors[p].offset < self._end_offsets[p]}

    def _start(self) -> None:
        self._stop.clear()
        self._queue = queue.Queue(maxsize=self.cfg.prefetch)
        live = self._live(self._cursors)
        for r in self._readers:
            r.open(self._cursors, live)
        self._thread = threading.Thread(
            target=self._run, args=(dict(self._cursors), self._current, live), daemon=True, name="kafka-block-prefetch"
        )
        self._thread.start()

    def _join(self) -> None:
        if self._thread is not None:
            self._stop.set()
            while self._thread.is_alive():
                try:  # unblock a producer waiting on a full queue
                    self._queue.get_nowait()
                except queue.Empty:
                    self._thread.join(0.05)
            self._thread = None
        for r in self._readers:
            r.close()

    def _stop_prefetch(self) -> None:
        self._join()
        # rewind the assembler to what was delivered; prefetched batches are thrown away
        self._cursors = {
            int(p): Cursor(c["offset"], c["block"]) for p, c in self._delivered_state["partitions"].items()
        }
        self._current = self._delivered_state["current"]
        if self._delivered_state["interleave"] is not None:
            self._interleaver.set_state(self._delivered_state["interleave"])
        self._finished = False

    def _put(self, item: Any) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _run(self, cursors: dict[int, Cursor], current: int | None, live: set[int]) -> None:
        try:
            self._assemble(cursors, current, live)
        except BaseException as exc:  # noqa: BLE001 - handed to the training thread, raised by __next__
            self._put(exc)

    def _assemble(self, cursors: dict[int, Cursor], current: int | None, live: set[int]) -> None:
        cfg = self.cfg
        B, L = cfg.batch_size, cfg.seq_len
        streaming = self._end_offsets is None
        il = self._interleaver
        while not self._stop.is_set():
            out = torch.empty((B, L), dtype=torch.int64, pin_memory=self.pin)
            arr = out.numpy()
            trace: list[tuple[int, int, int]] | None = [] if cfg.trace else None
            fill = 0
            while fill < B:
                if self._stop.is_set():
                    return
                if current is None:
                    if streaming:
                        ready = self._wait_ready(live)
                        if ready is None:
                            self._put(self._end(fill, cursors, current))
                            return
                        current = il.next_partition(ready)
                    else:
                        current = il.next_partition(live)
                        if current is None:
                            self._put(self._end(fill, cursors, current))
                            return
                p = current
                reader = self._reader_of[p]
                buf = reader.buffers[p]
                if not buf and not self._wait_for(reader, p):
                    self._put(self._end(fill, cursors, current))  # streaming mode only: idle timeout
                    return
                head = buf[0]
                if head.error is not None:
                    raise head.error
                c = cursors[p]
                if head.blocks is None:  # position marker: end of partition / transaction markers
                    buf.popleft()
                    if head.offset > c.offset:
                        cursors[p] = Cursor(head.offset)
                    if self._end_offsets is not None and cursors[p].offset >= self._end_offsets[p]:
                        live.discard(p)
                        current = None
                    elif streaming:
                        current = None
                    reader.drained(p)
                    continue
                if head.offset < c.offset:  # before the resume point (cannot happen after a seek)
                    buf.popleft()
                    continue
                first = c.block if head.offset == c.offset else 0
                n = head.blocks.shape[0]
                take = min(n - first, B - fill)
                arr[fill : fill + take] = head.blocks[first : first + take]
                if trace is not None:
                    trace.extend((p, head.offset, b) for b in range(first, first + take))
                fill += take
                if first + take == n:
                    buf.popleft()
                    cursors[p] = Cursor(head.offset + 1)
                    current = None
                    if self._end_offsets is not None and head.offset + 1 >= self._end_offsets[p]:
                        live.discard(p)
                    reader.drained(p)
                else:
                    cursors[p] = Cursor(head.offset, first + take)
            if not self._put(_Batch(out, self._snapshot(cursors, current), trace)):
                return

    def _end(self, fill: int, cursors: Mapping[int, Cursor], current: int | None) -> _End:
        # a dropped short batch keeps its blocks unconsumed: the state stays at the last batch
        return _End(self._snapshot(cursors, current) if fill == 0 else None)

    def _wait_for(self, reader: _Reader, p: int) -> bool:
        """Fetch until partition p has an entry. Bounded: raise after idle_timeout_s; streaming: False."""
        deadline = time.monotonic() + self.cfg.idle_timeout_s
        buf = reader.buffers[p]
        while not buf:
            if self._stop.is_set():
                return False
            reader.fill(self.cfg.poll_timeout_s)
            if buf:
                return True
            if time.monotonic() > deadline:
                if self._end_offsets is None:
                    return False
                raise TimeoutError(
                    f"{self.cfg.topic}[{p}]: no data for {self.cfg.idle_timeout_s:g}s before the end offset "
                    f"{self._end_offsets[p]} captured at start (brokers down, or records deleted?)"
                )
        return True

    def _wait_ready(self, live: set[int]) -> set[int] | None:
        """Streaming: partitions with fetched entries; None after idle_timeout_s without any."""
        deadline = time.monotonic() + self.cfg.idle_timeout_s
        while not self._stop.is_set():
            ready = {p for r in self._readers for p, b in r.buffers.items() if b and p in live}
            if ready:
                return ready
            if time.monotonic() > deadline:
                return None
            for r in self._readers:
                r.fill(self.cfg.poll_timeout_s / len(self._readers))
        return None


def _list_offsets(
    admin: Any, topic: str, partitions: Sequence[int], spec: OffsetSpec, timeout: float
) -> dict[int, int]:
    req = {TopicPartition(topic, p): spec for p in partitions}
    futures = admin.list_offsets(req, isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=timeout)
    return {tp.partition: int(f.result().offset) for tp, f in futures.items()}


def gather_state(loader: KafkaBlockLoader, group: Any = None) -> list[dict[str, Any]]:
    """Every rank's `state_dict()`, on every rank (collective: all ranks must call it).

    Save the list in the checkpoint; `load_state_dict(list)` picks this rank's entry, or
    merges them when the world size changed.
    """
    import torch.distributed as dist

    states: list[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(states, loader.state_dict(), group=group)
    return states
