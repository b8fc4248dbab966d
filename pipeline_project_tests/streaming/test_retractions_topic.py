"""`<topic>.retractions` on the real stack: a request too large for one record is written in parts, a write cut
short is completed by its retry, and a batch's messages come back as runs broken only by another batch's messages."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Producer

from pipeline_project.streaming.kafka.client import KafkaSettings, ensure_topic
from pipeline_project.streaming.kafka.format import H_SOURCE
from pipeline_project.streaming.retractions import BlockRange, Retraction
from pipeline_project.streaming.retractions.model import PART_RANGES
from pipeline_project.streaming.retractions.resolve import batch_messages
from pipeline_project.streaming.retractions.topic import (
    RetractionConflictError,
    ensure_retractions_topic,
    read_retractions,
    retractions_topic,
    write_retraction,
)

pytestmark = pytest.mark.stack


def _topic(kafka: KafkaSettings) -> str:
    topic = f"test-retractions-{uuid.uuid4().hex[:8]}"
    ensure_topic(kafka.make_admin(), topic, partitions=2, replication_factor=3)
    return topic


def test_a_request_of_many_ranges_is_written_in_parts_and_a_cut_write_is_completed(stack):
    kafka = KafkaSettings(bootstrap_servers=stack.kafka_bootstrap)
    topic = _topic(kafka)
    # every other message of 2 partitions: 25,000 single-message ranges, ~50 bytes of JSON each (one record of
    # ~1.3 MB before parts: past the brokers' 1 MB message limit)
    blocks = tuple(BlockRange(partition=p, offset=o) for p in (0, 1) for o in range(0, 5 * PART_RANGES, 2))
    request = Retraction(request_id="gdpr-big", reason="erasure", blocks=blocks)
    parts = request.split()
    assert len(parts) == 5 and len(request.model_dump_json()) > 1_000_000

    # a write cut short: only the middle part reached the topic
    ensure_retractions_topic(kafka.make_admin(), topic)
    producer = Producer(kafka.producer_config())
    producer.produce(retractions_topic(topic), key=parts[1].key.encode(), value=parts[1].to_json())
    assert producer.flush(30) == 0
    index = read_retractions(kafka, topic)
    assert index.parts_of("gdpr-big") == {1} and index.covers(*_at(parts[1].blocks[0]))
    assert not index.covers(*_at(parts[0].blocks[0]))

    assert write_retraction(kafka, topic, request) is True  # writes the four others only
    index = read_retractions(kafka, topic)
    assert index.parts_of("gdpr-big") == set(range(5)) and set(index.requests["gdpr-big"].blocks) == set(blocks)
    assert all(index.covers(*_at(b)) for b in blocks) and not index.covers(0, 1)
    assert write_retraction(kafka, topic, request) is False  # whole: nothing written
    with pytest.raises(RetractionConflictError, match="never changes"):
        write_retraction(kafka, topic, request.model_copy(update={"reason": "other"}))


def test_a_batch_interleaved_with_another_comes_back_as_runs(stack):
    kafka = KafkaSettings(bootstrap_servers=stack.kafka_bootstrap)
    topic = _topic(kafka)
    producer = Producer(kafka.producer_config())
    sources = ["a"] * 40 + ["b"] * 3 + ["a"] * 30 + ["b"]  # offsets 0-39 a, 40-42 b, 43-72 a, 73 b
    for source in sources:
        producer.produce(topic, value=b"x", partition=0, headers=[(H_SOURCE, source.encode())])
    assert producer.flush(30) == 0
    runs = batch_messages(kafka, topic, {"0": (0, len(sources) - 1)}, "a")
    assert [(r.offset, r.last) for r in runs] == [(0, 39), (43, 72)]
    assert [(r.offset, r.last) for r in batch_messages(kafka, topic, {"0": (0, 73)}, "b")] == [(40, 42), (73, 73)]


def _at(blocks: BlockRange) -> tuple[int, int]:
    return blocks.partition, blocks.offset
