"""The bounded transactions of one batch: a staged chunk plus its ledger record, committed or aborted together.

`BatchTransactions` owns the transactional producer of one ledger key and the running totals of
what the batch's committed transactions hold (over all attempts: it starts from the progress
record an interrupted attempt left). `write_chunk` produces one staged chunk (`staging.Chunk`)
round robin over the partitions, continuing the message count so the partitions are those of an
uninterrupted run, then the ledger record the caller builds from the updated totals (progress, or
the completion record for the last chunk), and commits. `write_completion` commits the completion
record alone. Any failure inside a transaction aborts it; the committed totals stay as they were.
A failure that the abort clears (`abortable`: librdkafka's "requires epoch bump" when a partition
leader moves mid-transaction, and the messages it purged then) is produced again, up to
`abortable_retries` times, as the transactional API intends; any other failure is re-raised, and the
caller's retry resumes after the committed transactions.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from pipeline_project.streaming.errors import DeliveryError
from pipeline_project.streaming.kafka.client import DeliveryTracker, flush_or_raise
from pipeline_project.streaming.ledger.records import (
    ProduceReport,
    ProgressRecord,
    ledger_topic,
    merge_ranges,
    progress_key,
)
from pipeline_project.streaming.produce.staging import Chunk

log = logging.getLogger(__name__)


@dataclass
class BatchTotals:
    """What the batch's committed transactions hold so far (seeded from an earlier attempt's progress record)."""

    transactions: int = 0
    messages: int = 0
    blocks: int = 0
    bytes: int = 0
    pad_tokens: int = 0
    padded_blocks: int = 0
    offsets: dict[int, tuple[int, int]] = field(default_factory=dict)
    resumed_blocks: int = 0  # committed by earlier attempts
    progress_written: bool = False  # a progress record of this batch is in the ledger
    # per domain (messages with a domain header): {"messages", "blocks", "pad_tokens"}
    domains: dict[str, dict[str, int]] = field(default_factory=dict)

    @classmethod
    def from_progress(cls, p: ProgressRecord | None) -> BatchTotals:
        if p is None:
            return cls()
        return cls(
            p.transactions,
            p.messages,
            p.blocks,
            p.bytes,
            p.pad_tokens,
            p.padded_blocks,
            dict(p.offsets),
            resumed_blocks=p.blocks,
            progress_written=True,
            domains={d: dict(c) for d, c in p.domains.items()},
        )

    def plus(self, chunk: Chunk, offsets: dict[int, tuple[int, int]]) -> BatchTotals:
        return replace(
            self,
            transactions=self.transactions + 1,
            messages=self.messages + len(chunk.messages),
            blocks=self.blocks + chunk.blocks,
            bytes=self.bytes + chunk.bytes,
            pad_tokens=self.pad_tokens + sum(m.pad_tokens for m in chunk.messages),
            padded_blocks=self.padded_blocks + sum(m.padded_blocks for m in chunk.messages),
            offsets=merge_ranges(self.offsets, offsets),
            domains=_add_domains(self.domains, chunk),
        )


def _add_domains(domains: dict[str, dict[str, int]], chunk: Chunk) -> dict[str, dict[str, int]]:
    out = {d: dict(c) for d, c in domains.items()}
    for m in chunk.messages:
        if m.domain is None:
            continue
        c = out.setdefault(m.domain, {"messages": 0, "blocks": 0, "pad_tokens": 0})
        c["messages"] += 1
        c["blocks"] += m.blocks
        c["pad_tokens"] += m.pad_tokens
    return dict(sorted(out.items()))


class BatchTransactions:
    def __init__(
        self,
        producer: Any,
        *,
        txid: str,
        topic: str,
        ledger_key: str,
        partitions: list[int],
        start: int,
        totals: BatchTotals,
        flush_timeout_s: float,
        abortable_retries: int = 3,
    ):
        self.producer = producer
        self.txid = txid
        self.topic = topic
        self.ledger = ledger_topic(topic)
        self.ledger_key = ledger_key
        self.partitions = partitions
        self.start = start
        self.totals = totals
        self.flush_timeout_s = flush_timeout_s
        self.abortable_retries = abortable_retries
        self.retried = 0  # transactions aborted and produced again
        self.tracker = DeliveryTracker()  # this attempt's deliveries: data and ledger offsets
        self._aborted = False  # the last failed transaction's abort went through

    def write_chunk(self, chunk: Chunk, record: Callable[[BatchTotals], ProduceReport | ProgressRecord]) -> None:
        """One transaction: the chunk's messages, then `record(totals after the chunk)` in the ledger; commit."""
        self._retrying(lambda: self._write_chunk(chunk, record))

    def write_completion(self, report: ProduceReport) -> None:
        """One transaction holding only the completion record (empty input, or all chunks committed earlier)."""
        self._retrying(lambda: self._write_completion(report))

    def _retrying(self, write: Callable[[], None]) -> None:
        for attempt in range(1, self.abortable_retries + 2):
            try:
                return write()
            except Exception as exc:
                if attempt > self.abortable_retries or not self._aborted or not abortable(exc):
                    raise
                self.retried += 1
                log.warning(
                    "transaction %s aborted (%s); producing it again (retry %d of %d)",
                    self.txid,
                    exc,
                    attempt,
                    self.abortable_retries,
                )
                time.sleep(0.5 * attempt)

    def _write_chunk(self, chunk: Chunk, record: Callable[[BatchTotals], ProduceReport | ProgressRecord]) -> None:
        t = self.totals
        self.producer.begin_transaction()
        try:
            chunk_tracker = DeliveryTracker()
            for i, m in enumerate(chunk.messages):
                partition = self.partitions[(self.start + t.messages + i) % len(self.partitions)]
                self._produce(self.topic, m.value, m.headers, partition, chunk_tracker)
                chunk_tracker.raise_for_failures()
            flush_or_raise(self.producer, chunk_tracker, self.flush_timeout_s)
            after = t.plus(chunk, chunk_tracker.partition_ranges(self.topic))
            self._produce_record(record(after), chunk_tracker)
            flush_or_raise(self.producer, chunk_tracker, self.flush_timeout_s)
            self.producer.commit_transaction(self.flush_timeout_s)
        except BaseException:
            self._aborted = self._abort_quietly()
            raise
        self.totals = replace(after, progress_written=t.progress_written or not chunk.last)
        self._merge(chunk_tracker)

    def _write_completion(self, report: ProduceReport) -> None:
        self.producer.begin_transaction()
        try:
            tracker = DeliveryTracker()
            self._produce_record(report, tracker)
            flush_or_raise(self.producer, tracker, self.flush_timeout_s)
            self.producer.commit_transaction(self.flush_timeout_s)
        except BaseException:
            self._aborted = self._abort_quietly()
            raise
        self._merge(tracker)

    def _produce_record(self, record: ProduceReport | ProgressRecord, tracker: DeliveryTracker) -> None:
        if isinstance(record, ProgressRecord):
            self._produce(self.ledger, record.to_json(), None, None, tracker, key=progress_key(self.ledger_key))
            return
        self._produce(self.ledger, record.to_ledger_json(), None, None, tracker, key=self.ledger_key)
        if self.totals.progress_written:  # the batch is complete: its progress record goes
            self._produce(self.ledger, None, None, None, tracker, key=progress_key(self.ledger_key))

    def _produce(
        self,
        topic: str,
        value: bytes | None,
        headers: list | None,
        partition: int | None,
        tracker: DeliveryTracker,
        key: str | None = None,
    ) -> None:
        kwargs: dict[str, Any] = {"value": value, "on_delivery": tracker.on_delivery}
        if headers is not None:
            kwargs["headers"] = headers
        if partition is not None:
            kwargs["partition"] = partition
        if key is not None:
            kwargs["key"] = key.encode()
        while True:
            try:
                self.producer.produce(topic, **kwargs)
                break
            except BufferError:  # local queue full: let librdkafka drain it
                self.producer.poll(0.05)
        self.producer.poll(0)

    def _merge(self, tracker: DeliveryTracker) -> None:
        for (topic, p), (lo, hi) in tracker.offsets.items():
            old = self.tracker.offsets.get((topic, p), (lo, hi))
            self.tracker.offsets[(topic, p)] = (min(lo, old[0]), max(hi, old[1]))

    def _abort_quietly(self) -> bool:
        try:
            self.producer.abort_transaction(30)
            return True
        except KafkaException as exc:  # e.g. fenced: the broker aborts it for us
            log.warning("abort of transaction %s failed: %s", self.txid, exc)
            return False


# delivery failures that say nothing of the producer's health: the messages an abortable error purged
_ABORTABLE_DELIVERY = {KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT, KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER}


def abortable(exc: BaseException) -> bool:
    """Is `exc` a transaction failure that aborting and producing the same messages again rides out?

    Yes for librdkafka's abortable transaction errors (`txn_requires_abort`, e.g. "skipped sequence numbers,
    requires epoch bump" after a leader moved) and the deliveries they purged; no for fatal errors (a fenced
    producer), timeouts (brokers away: the caller's retry waits better), and anything that is not Kafka's."""
    if isinstance(exc, KafkaException):
        err = exc.args[0] if exc.args else None
        return isinstance(err, KafkaError) and not err.fatal() and err.txn_requires_abort()
    if isinstance(exc, DeliveryError):
        err = exc.kafka_error
        return isinstance(err, KafkaError) and not err.fatal() and err.code() in _ABORTABLE_DELIVERY
    return False
