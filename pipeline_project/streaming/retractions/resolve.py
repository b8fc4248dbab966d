"""Which messages of the topic a batch's ledger record stands for: its offset ranges hold the batch's messages and
possibly other batches' (transactions of several producers interleave in a partition), so each message in range is
read and kept when its source header names the batch. The messages come back as runs: a run of the batch's messages
ends only at another batch's message (a transaction marker between two of its messages holds no message), so a
batch written alone in its partitions is one range per partition, whatever its size."""

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
    """Every message in `offsets` ({partition: (first, last)}, inclusive) whose source is `source`, whole, as runs."""
    consumer = settings.make_consumer(overrides={"enable.partition.eof": True})
    found: list[BlockRange] = []
    wanted = source.encode()
    try:
        for partition, (first, last) in sorted((int(p), (int(r[0]), int(r[1]))) for p, r in offsets.items()):
            consumer.assign([TopicPartition(topic, partition, first)])
            deadline, done = time.monotonic() + timeout_s, False
            runs: list[list[int]] = []
            run: list[int] | None = None
            while not done:
                if time.monotonic() > deadline:
                    raise StreamingError(f"{topic}[{partition}]: offsets {first}..{last} not read in {timeout_s:g} s")
                for msg in consumer.consume(num_messages=500, timeout=0.5):
                    if msg.error() or msg.offset() > last:
                        done = True  # the partition's end, or past the range
                        break
                    if dict(msg.headers() or []).get(H_SOURCE) != wanted:
                        run = None
                    elif run is None:
                        run = [msg.offset(), msg.offset()]
                        runs.append(run)
                    else:
                        run[1] = msg.offset()
            found.extend(_ranges(partition, runs))
    finally:
        consumer.close()
    return tuple(found)


def _ranges(partition: int, runs: list[list[int]]) -> list[BlockRange]:
    return [BlockRange(partition=partition, offset=a, last_offset=b if b > a else None) for a, b in runs]
