"""`<topic>.retractions`: the compacted, one-partition topic that holds a token topic's retractions, keyed by
request id. Writing checks what the topic holds first: a request already there with the same content is not
written again, and one with other content is refused (a request never changes; retract more under a new id).
A write whose answer was lost is settled the same way: the retry finds the request and writes nothing."""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

from pipeline_project.streaming.errors import StreamingError
from pipeline_project.streaming.kafka.client import DeliveryTracker, KafkaSettings, flush_or_raise
from pipeline_project.streaming.kafka.topics import ensure_companion_topic
from pipeline_project.streaming.retractions.index import RetractionIndex
from pipeline_project.streaming.retractions.model import Retraction, ordered


class RetractionConflictError(StreamingError, ValueError):
    """A request id the topic already holds, with other blocks or another reason."""


def retractions_topic(topic: str) -> str:
    return f"{topic}.retractions"


def ensure_retractions_topic(admin: Any, topic: str, timeout_s: float = 30.0) -> None:
    """Compacted, one partition, replicated like its data topic (the ledger topic's layout)."""
    ensure_companion_topic(admin, topic, retractions_topic(topic), timeout_s)


def topic_exists(consumer: Consumer, name: str, timeout_s: float) -> bool:
    md = consumer.list_topics(topic=name, timeout=timeout_s).topics.get(name)
    return md is not None and md.error is None and bool(md.partitions)


def decode(value: bytes | None) -> Retraction | None:
    """A record's retraction; None for a tombstone."""
    return None if value is None else Retraction.model_validate_json(value)


class RetractionReader:
    """Reads `<topic>.retractions` forward into a `RetractionIndex`; each `read_to_end` takes what was committed
    since the last one (read_committed, up to the high watermark at the call). A missing topic reads as empty and
    is looked for again on the next call."""

    def __init__(self, settings: KafkaSettings, topic: str, timeout_s: float = 30.0) -> None:
        self.name = retractions_topic(topic)
        self.timeout_s = timeout_s
        self.index = RetractionIndex()
        self.position = 0  # the next offset to read
        self._consumer = settings.make_consumer(overrides={"enable.partition.eof": False})
        self._assigned = False

    def read_to_end(self) -> int:
        """Read what is new; returns the requests it added."""
        if not self._assigned:
            if not topic_exists(self._consumer, self.name, self.timeout_s):
                return 0
            self._consumer.assign([TopicPartition(self.name, 0, OFFSET_BEGINNING)])
            self._assigned = True
        _, high = self._consumer.get_watermark_offsets(TopicPartition(self.name, 0), timeout=self.timeout_s)
        added, deadline = 0, time.monotonic() + self.timeout_s
        while self.position < high:
            if time.monotonic() > deadline:
                raise StreamingError(f"{self.name}: read to offset {self.position} of {high} in {self.timeout_s:g} s")
            for msg in self._consumer.consume(num_messages=500, timeout=0.5):
                if msg.error():
                    raise KafkaException(msg.error())
                self.position = msg.offset() + 1
                retraction = decode(msg.value())
                if retraction is not None and self.index.add(retraction):
                    added += 1
            if self.position < high:  # transaction markers hold offsets no message comes from
                low_now = self._consumer.position([TopicPartition(self.name, 0)])[0].offset
                self.position = max(self.position, low_now)
        return added

    def close(self) -> None:
        self._consumer.close()


def read_retractions(settings: KafkaSettings, topic: str, timeout_s: float = 30.0) -> RetractionIndex:
    reader = RetractionReader(settings, topic, timeout_s)
    try:
        reader.read_to_end()
        return reader.index
    finally:
        reader.close()


def write_retraction(settings: KafkaSettings, topic: str, retraction: Retraction, timeout_s: float = 60.0) -> bool:
    """Write `retraction` once, as its parts (`Retraction.split`): False when the topic holds all of them already
    (nothing written). A request some of whose parts are there (a write cut short, or whose answer was lost) gets
    the parts it lacks, once the ones there are found to be this request's."""
    index = read_retractions(settings, topic, timeout_s)
    parts = retraction.split()
    held, there = index.requests.get(retraction.request_id), index.parts_of(retraction.request_id)
    if held is not None:
        same_parts = [b for p in parts if p.part in there for b in p.blocks]
        if held.reason != retraction.reason or held.parts != len(parts) or held.blocks != ordered(same_parts):
            raise RetractionConflictError(
                f"request {retraction.request_id!r} is in {retractions_topic(topic)} already, with other blocks or "
                "another reason; a request never changes: retract the rest under a new request id"
            )
    missing = [p for p in parts if p.part not in there]
    if not missing:
        return False
    ensure_retractions_topic(settings.make_admin(), topic, timeout_s)
    producer = settings.make_producer()
    tracker = DeliveryTracker()
    for part in missing:
        producer.produce(
            retractions_topic(topic), key=part.key.encode(), value=part.to_json(), on_delivery=tracker.on_delivery
        )
        producer.poll(0)
    flush_or_raise(producer, tracker, timeout_s)
    return True
