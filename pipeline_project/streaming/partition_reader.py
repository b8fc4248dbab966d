"""One loader worker: a Kafka consumer over a fixed set of partitions, demultiplexed into per-partition buffers.

Inputs are explicit (constructor): the consumer settings, topic, partitions, the bounded-mode end
offsets and the buffering limits. Outputs: `buffers[p]`, a deque of `BufferEntry` per partition in
offset order, which the batch assembler pops; `high_watermarks()`, the log end offsets last seen.

What lands in a buffer:

* a decoded message: `BufferEntry(offset, blocks)`;
* a message off the wire format: `BufferEntry(offset, error=MalformedMessageError)`, raised only when
  the assembler reaches it, so the blocks before it are still delivered;
* a position marker `BufferEntry(offset)` (`blocks` None): at partition EOF, everything before
  `offset` is consumed or a transaction marker; in bounded mode, the partition reached its end
  offset (the marker's offset is the end offset) and stays paused for good.

A partition whose buffer reaches `max_buffered_messages` is paused, and resumed by `drained()` once
half of it is delivered. Fatal or non-retriable consumer errors raise `KafkaException`.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from pipeline_project.streaming.errors import MalformedMessageError
from pipeline_project.streaming.format import decode_message
from pipeline_project.streaming.kafka_client import KafkaSettings

log = logging.getLogger(__name__)


@dataclass
class BufferEntry:
    offset: int
    blocks: np.ndarray | None = None  # (n, seq_len) uint32; None for a position marker
    error: BaseException | None = None


class PartitionReader:
    """Its own consumer over `partitions` of `topic`; `fill()` fetches into `buffers`."""

    def __init__(
        self,
        kafka: KafkaSettings,
        topic: str,
        partitions: Sequence[int],
        *,
        worker: int,
        client_id: str,
        seq_len: int,
        expected_tokenizer_hash: str | None,
        end_offsets: Mapping[int, int] | None,
        consume_messages: int,
        max_buffered_messages: int,
    ):
        self.kafka = kafka
        self.topic = topic
        self.partitions = tuple(partitions)
        self.worker = worker
        self.client_id = client_id
        self.seq_len = seq_len
        self.expected_tokenizer_hash = expected_tokenizer_hash
        self.end_offsets = dict(end_offsets) if end_offsets is not None else None  # None: streaming mode
        self.consume_messages = consume_messages
        self.max_buffered_messages = max_buffered_messages
        self.buffers: dict[int, deque[BufferEntry]] = {p: deque() for p in self.partitions}
        self.paused: set[int] = set()
        self.ended: set[int] = set()  # bounded mode: reached the end offset, paused for good
        self.consumer: Consumer | None = None
        self._high: dict[int, int] = {}  # last high watermark seen per partition, kept across close()

    def open(self, start_offsets: Mapping[int, int]) -> None:
        """Create the consumer and assign the partitions in `start_offsets` at those offsets."""
        self.consumer = self.kafka.make_consumer(overrides={"enable.partition.eof": True, "client.id": self.client_id})
        self.consumer.assign([TopicPartition(self.topic, p, off) for p, off in start_offsets.items()])

    def high_watermarks(self) -> dict[int, int]:
        """Log end offsets as last seen by fetches (cached: no network round trip), also after close()."""
        if self.consumer is not None:
            for p in self.partitions:
                try:
                    _, high = self.consumer.get_watermark_offsets(TopicPartition(self.topic, p), cached=True)
                except KafkaException:
                    continue
                if high is not None and high >= 0:
                    self._high[p] = int(high)
        return dict(self._high)

    def close(self) -> None:
        if self.consumer is not None:
            self.high_watermarks()
            self.consumer.close()
            self.consumer = None
        for b in self.buffers.values():
            b.clear()
        self.paused.clear()
        self.ended.clear()

    def fill(self, timeout: float) -> int:
        """One consume() call; returns how many entries were queued."""
        ends = self.end_offsets
        msgs = self.consumer.consume(num_messages=self.consume_messages, timeout=timeout)
        for msg in msgs:
            p = msg.partition()
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    # everything before msg.offset() is consumed or a transaction marker
                    self.buffers[p].append(BufferEntry(msg.offset()))
                elif err.fatal() or not err.retriable():
                    raise KafkaException(err)
                else:
                    log.warning("kafka consumer (worker %d): %s", self.worker, err.str())
                continue
            offset = msg.offset()
            if ends is not None and offset >= ends[p]:
                if p not in self.ended:
                    self.buffers[p].append(BufferEntry(ends[p]))
                    self.ended.add(p)
                    self._pause(p)
                continue
            try:
                blocks = decode_message(
                    msg.value(),
                    msg.headers(),
                    topic=self.topic,
                    partition=p,
                    offset=offset,
                    expected_seq_len=self.seq_len,
                    expected_tokenizer_hash=self.expected_tokenizer_hash,
                )
                self.buffers[p].append(BufferEntry(offset, blocks))
            except MalformedMessageError as exc:
                self.buffers[p].append(BufferEntry(offset, error=exc))
            if len(self.buffers[p]) >= self.max_buffered_messages:
                self._pause(p)
        return len(msgs)

    def _pause(self, p: int) -> None:
        if p not in self.paused:
            self.consumer.pause([TopicPartition(self.topic, p)])
            self.paused.add(p)

    def drained(self, p: int) -> None:
        """Resume a partition paused for a full buffer once half of it is delivered."""
        if p in self.paused and p not in self.ended and len(self.buffers[p]) <= self.max_buffered_messages // 2:
            self.consumer.resume([TopicPartition(self.topic, p)])
            self.paused.discard(p)
