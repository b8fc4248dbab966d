"""Shared helpers of the streaming integration tests: unique topics and read-to-end consumption."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, TopicPartition

from pipeline_project.streaming.kafka.client import KafkaSettings


def unique_topic(prefix: str) -> str:
    return f"test-{prefix}-{uuid.uuid4().hex[:10]}"


def kafka_settings(stack, **kw) -> KafkaSettings:
    return KafkaSettings(bootstrap_servers=stack.kafka_bootstrap, **kw)


def consume_all(settings: KafkaSettings, topic: str, *, isolation: str = "read_committed", timeout_s: float = 30.0):
    """Every message of `topic` from the beginning to the end visible under `isolation`."""
    consumer = settings.make_consumer(overrides={"enable.partition.eof": True, "isolation.level": isolation})
    try:
        md = consumer.list_topics(topic=topic, timeout=10).topics[topic]
        parts = sorted(md.partitions)
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
        pending, out = set(parts), []
        deadline = time.monotonic() + timeout_s
        while pending:
            assert time.monotonic() < deadline, f"did not reach the end of {topic} within {timeout_s}s"
            for msg in consumer.consume(num_messages=500, timeout=0.5):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        pending.discard(msg.partition())
                        continue
                    if err.retriable() or err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                        continue  # a just-created partition not served yet; the deadline bounds this
                    raise KafkaException(err)
                out.append(msg)
        return out
    finally:
        consumer.close()


def recreate_topic(settings: KafkaSettings, topic: str, timeout_s: float = 60.0, **layout) -> None:
    """Delete `topic` and create it again under the same name (a new topic id), with `ensure_topic`'s layout."""
    from pipeline_project.streaming.errors import TopicError
    from pipeline_project.streaming.kafka.topics import ensure_topic

    admin = settings.make_admin()
    admin.delete_topics([topic], operation_timeout=timeout_s)[topic].result(timeout=timeout_s)
    deadline = time.monotonic() + timeout_s
    while topic in admin.list_topics(timeout=10).topics:
        assert time.monotonic() < deadline, f"{topic} still listed {timeout_s}s after its deletion"
        time.sleep(0.2)
    while True:
        try:
            ensure_topic(admin, topic, **layout)
            return
        except TopicError:  # the brokers may still be removing the old incarnation's partitions
            assert time.monotonic() < deadline, f"{topic} could not be created again within {timeout_s}s"
            time.sleep(0.5)


def grow_topic(settings: KafkaSettings, topic: str, partitions: int, timeout_s: float = 30.0) -> None:
    """Add partitions to `topic` (AdminClient.create_partitions) and wait until metadata shows them."""
    from confluent_kafka.admin import NewPartitions

    admin = settings.make_admin()
    admin.create_partitions([NewPartitions(topic, partitions)])[topic].result(timeout=timeout_s)
    deadline = time.monotonic() + timeout_s
    while len(admin.list_topics(topic=topic, timeout=10).topics[topic].partitions) < partitions:
        assert time.monotonic() < deadline, f"{topic} does not show {partitions} partitions"
        time.sleep(0.2)


def last_stable_offsets(settings: KafkaSettings, topic: str, partitions) -> dict[int, int]:
    from confluent_kafka import IsolationLevel
    from confluent_kafka.admin import OffsetSpec

    admin = settings.make_admin()
    req = {TopicPartition(topic, p): OffsetSpec.latest() for p in partitions}
    futures = admin.list_offsets(req, isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=10)
    return {tp.partition: f.result(timeout=10).offset for tp, f in futures.items()}


class DeliveredMessage:
    """What a delivery report hands its callback (confluent_kafka.Message's accessors), for tests of pure logic."""

    def __init__(self, topic: str, partition: int, offset: int, value: bytes | None = b"xx"):
        self._t, self._p, self._o, self._v = topic, partition, offset, value

    def topic(self):
        return self._t

    def partition(self):
        return self._p

    def offset(self):
        return self._o

    def value(self):
        return self._v
