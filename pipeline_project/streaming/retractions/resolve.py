"""Which messages of the topic a batch's ledger record stands for: its offset ranges hold the batch's messages and
possibly other batches' (transactions of several producers interleave in a partition), so each message in range is
read and kept when its source header names the batch."""

from __future__ import annotations

import time

from confluent_kafka import TopicPartition

from pipeline_project.streaming.errors import StreamingError
from pipeline_project.streaming.kafka.client import KafkaSettings
from pipeline_project.streaming.kafka.format import H_SOURCE
from pipeline_project.streaming.retractions.model import BlockRange


def batch_messages(
    settings: KafkaSettings, topic: str, offsets: dict, source: str, timeout_s: float = 30.0
) -> tuple[BlockRange, ...]:
    """Every message in `offsets` ({partition: (first, last)}, inclusive) whose source is `source`, whole."""
    consumer = settings.make_consumer(overrides={"enable.partition.eof": True})
    found: list[BlockRange] = []
    wanted = source.encode()
    try:
        for partition, (first, last) in sorted((int(p), (int(r[0]), int(r[1]))) for p, r in offsets.items()):
            consumer.assign([TopicPartition(topic, partition, first)])
            deadline, done = time.monotonic() + timeout_s, False
            while not done:
                if time.monotonic() > deadline:
                    raise StreamingError(f"{topic}[{partition}]: offsets {first}..{last} not read in {timeout_s:g} s")
                for msg in consumer.consume(num_messages=500, timeout=0.5):
                    if msg.error() or msg.offset() > last:
                        done = True  # the partition's end, or past the range
                        break
                    if dict(msg.headers() or []).get(H_SOURCE) == wanted:
                        found.append(BlockRange(partition=partition, offset=msg.offset()))
    finally:
        consumer.close()
    return tuple(found)
