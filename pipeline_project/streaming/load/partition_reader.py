"""One loader worker: a Kafka consumer over a fixed set of partitions, demultiplexed into per-partition buffers.

Inputs are explicit (constructor): the consumer settings, topic, partitions, the bounded-mode end
offsets and the buffering limits. Outputs: `buffers[p]`, a deque of `BufferEntry` per partition in
offset order, which the batch assembler pops; `high_watermarks()`, the log end offsets last seen.

What lands in a buffer:

* a decoded message: `BufferEntry(offset, blocks, pad_tokens)`;
* a message off the wire format: `BufferEntry(offset, error=MalformedMessageError, raw=(value, headers))`,
  handled only when the assembler reaches it (skipped into a dead letter), so the blocks before it are
  still delivered in order;
* records deleted under the consumer (the consumer runs with `auto.offset.reset=error`, so it never
  jumps on its own): `BufferEntry(log start offset, error=DataLossError)`. With `allow_data_loss` the
  reader re-assigns the partition at the log start and the assembler skips to it, counting the gap;
  without, the assembler raises it;
* a position marker `BufferEntry(offset)` (`blocks` None): at partition EOF, everything before
  `offset` is consumed or a transaction marker; in bounded mode, the partition reached its end
  offset (the marker's offset is the end offset) and stays paused for good.

Stripes (ranks sharing a partition, `stripes.py`): a reader given `shares` keeps only the messages of its
stripe, and passes over the messages that `skips` (set by `open`) name as consumed by an earlier layout;
a message whose first blocks were consumed gets `BufferEntry.first`. What it passes over becomes a
position marker, as below.

Domain streams (a loader drawing a mixture): a reader built with `domain` keeps only that domain's messages
(by their `domain` header, read before the payload is touched); another domain's message becomes a position
marker past it (consecutive ones collapse into one marker). A message whose header cannot be read is a
malformed entry only for the `primary` reader (so it is dead-lettered once), a marker for the others.
`outside_blocks` counts the blocks the primary reader fetched of domains not in `known_domains`.

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

from pipeline_project.streaming.errors import DataLossError, MalformedMessageError
from pipeline_project.streaming.kafka.client import KafkaSettings
from pipeline_project.streaming.kafka.format import decode_blocks, read_header
from pipeline_project.streaming.load.stripes import Share, Skips

log = logging.getLogger(__name__)


@dataclass
class BufferEntry:
    offset: int
    blocks: np.ndarray | None = None  # (n, seq_len) uint32; None for a position marker
    error: BaseException | None = None
    pad_tokens: int = 0  # PAD_TOKENs among `blocks`
    raw: tuple[bytes | None, list | None] | None = None  # a malformed message's value and headers
    first: int = 0  # blocks of this message an earlier layout already delivered


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
        allow_data_loss: bool = False,
        domain: str | None = None,
        primary: bool = True,
        known_domains: frozenset[str] = frozenset(),
        shares: Mapping[int, Share] | None = None,
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
        self.allow_data_loss = allow_data_loss
        self.domain = domain  # None: every message (no mixture)
        self.primary = primary
        self.known_domains = known_domains
        self.shares = {p: s for p, s in (shares or {}).items() if s.stripes > 1 and p in self.partitions}
        self.skips: dict[int, Skips] = {}
        self.outside_blocks: dict[str, int] = {}  # primary domain reader: fetched blocks of unlisted domains
        self.buffers: dict[int, deque[BufferEntry]] = {p: deque() for p in self.partitions}
        self.paused: set[int] = set()
        self.ended: set[int] = set()  # bounded mode: reached the end offset, paused for good
        self.at_end: set[int] = set()  # the last fetch of these ended at the log end (EOF): caught up
        self.consumer: Consumer | None = None
        self._high: dict[int, int] = {}  # last high watermark seen per partition, kept across close()

    def open(self, start_offsets: Mapping[int, int], skips: Mapping[int, Skips] | None = None) -> None:
        """Create the consumer and assign the partitions in `start_offsets` at those offsets; `skips`: messages
        ahead of them that were already consumed (passed over, or started at their first unconsumed block)."""
        self.skips = {p: sk for p, sk in (skips or {}).items() if sk and p in self.partitions}
        # auto.offset.reset=error: an offset that is gone raises instead of jumping (earliest) or skipping (latest)
        overrides = {"enable.partition.eof": True, "client.id": self.client_id, "auto.offset.reset": "error"}
        self.consumer = self.kafka.make_consumer(overrides=overrides)
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
        self.at_end.clear()

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
                    self.at_end.add(p)
                elif err.code() == KafkaError._AUTO_OFFSET_RESET and p in self.buffers:
                    self._offset_gone(p, msg.offset(), err.str())
                elif err.fatal() or not err.retriable():
                    raise KafkaException(err)
                else:
                    log.warning("kafka consumer (worker %d): %s", self.worker, err.str())
                continue
            offset = msg.offset()
            self.at_end.discard(p)
            if ends is not None and offset >= ends[p]:
                if p not in self.ended:
                    self.buffers[p].append(BufferEntry(ends[p]))
                    self.ended.add(p)
                    self._pause(p)
                continue
            first = self._first_block(p, offset)
            if first is None:
                self._pass_over(p, offset)
                continue
            if self.domain is not None and not self._mine(p, msg):
                continue
            try:
                header, blocks = decode_blocks(
                    msg.value(),
                    msg.headers(),
                    topic=self.topic,
                    partition=p,
                    offset=offset,
                    expected_seq_len=self.seq_len,
                    expected_tokenizer_hash=self.expected_tokenizer_hash,
                )
                self.buffers[p].append(BufferEntry(offset, blocks, pad_tokens=header.pad_tokens, first=first))
            except MalformedMessageError as exc:
                self.buffers[p].append(BufferEntry(offset, error=exc, raw=(msg.value(), msg.headers())))
            if len(self.buffers[p]) >= self.max_buffered_messages:
                self._pause(p)
        return len(msgs)

    def _mine(self, p: int, msg) -> bool:
        """Domain stream: is the message of this reader's domain? Otherwise it becomes a marker past it."""
        try:
            header = read_header(msg.headers(), topic=self.topic, partition=p, offset=msg.offset())
        except MalformedMessageError:
            if self.primary:
                return True  # decoded (and dead-lettered) below
            domain = None
        else:
            domain = header.domain
            if domain == self.domain:
                return True
            if self.primary and domain not in self.known_domains:
                key = domain if domain is not None else ""
                self.outside_blocks[key] = self.outside_blocks.get(key, 0) + header.blocks
        self._pass_over(p, msg.offset())
        return False

    def _first_block(self, p: int, offset: int) -> int | None:
        """The first block of the message to deliver; None when it is another stripe's or already consumed."""
        share = self.shares.get(p)
        if share is not None and not share.owns(offset):
            return None
        skips = self.skips.get(p)
        return skips.first_block(offset) if skips is not None else 0

    def _pass_over(self, p: int, offset: int) -> None:
        """A position marker past the message at `offset`, collapsed into a marker right before it."""
        buf = self.buffers[p]
        if buf and buf[-1].blocks is None and buf[-1].error is None:
            buf[-1].offset = offset + 1
        else:
            buf.append(BufferEntry(offset + 1))
            if len(buf) >= self.max_buffered_messages:
                self._pause(p)

    def _offset_gone(self, p: int, wanted: int, text: str) -> None:
        """The fetch offset of partition p is out of range: its records were deleted (or the topic replaced)."""
        tp = TopicPartition(self.topic, p)
        low, _high = self.consumer.get_watermark_offsets(tp, timeout=10, cached=False)
        if wanted < 0 or not low > wanted:  # not below the log start: past the end, or unknown
            raise KafkaException(KafkaError(KafkaError._AUTO_OFFSET_RESET, f"{self.topic}[{p}]: {text}"))
        self.buffers[p].append(BufferEntry(low, error=DataLossError(self.topic, {p: (wanted, low)})))
        if self.allow_data_loss:  # a seek is refused after this error: assign the partition afresh
            self.consumer.incremental_unassign([tp])
            self.consumer.incremental_assign([TopicPartition(self.topic, p, low)])
        else:
            self._pause(p)

    def _pause(self, p: int) -> None:
        if p not in self.paused:
            self.consumer.pause([TopicPartition(self.topic, p)])
            self.paused.add(p)

    def drained(self, p: int) -> None:
        """Resume a partition paused for a full buffer once half of it is delivered."""
        if p in self.paused and p not in self.ended and len(self.buffers[p]) <= self.max_buffered_messages // 2:
            self.consumer.resume([TopicPartition(self.topic, p)])
            self.paused.discard(p)
