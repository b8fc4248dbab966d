"""Test data for the loader tests: a fresh topic of uniquely numbered token blocks.

Block `uid` holds tokens `uid * 1000 + arange(seq_len)`, so any delivered row names the
block it came from. Messages carry 1..4 blocks, produced in Kafka transactions, so offsets
have gaps (transaction markers) and batches cut messages (partial-block cursors).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field

import numpy as np
from confluent_kafka import Producer, TopicPartition

from pipeline_project.streaming.kafka.client import KafkaSettings
from pipeline_project.streaming.kafka.format import encode_message
from pipeline_project.streaming.kafka.topics import ensure_topic

TOKENIZER_HASH = "test-hash"
SEQ_LEN = 16


@dataclass
class TopicData:
    topic: str
    partitions: int
    # (partition, offset, block_index) -> uid, for every committed block
    blocks: dict[tuple[int, int, int], int] = field(default_factory=dict)
    domains: dict[tuple[int, int, int], str] = field(default_factory=dict)  # the block's domain header, if any
    next_uid: int = 1

    def expected_row(self, key: tuple[int, int, int]) -> np.ndarray:
        return self.blocks[key] * 1000 + np.arange(SEQ_LEN, dtype=np.int64)


def make_topic(settings: KafkaSettings, partitions: int) -> TopicData:
    admin = settings.make_admin()
    brokers = len(admin.list_topics(timeout=30).brokers)
    name = f"test-loader-{uuid.uuid4().hex[:12]}"
    ensure_topic(
        admin, name, partitions=partitions, replication_factor=min(3, brokers), min_insync_replicas=min(2, brokers)
    )
    return TopicData(name, partitions)


def produce(
    settings: KafkaSettings,
    data: TopicData,
    messages_per_partition: int,
    *,
    seed: int = 0,
    abort: bool = False,
    tokenizer_hash: str = TOKENIZER_HASH,
    domains: tuple[str, ...] = (),
) -> list[tuple[int, int, int]]:
    """Produce in one transaction; record the blocks unless aborted. Returns the keys written.

    With `domains`, every message carries one of them (drawn at random) in its `domain` header."""
    rng = np.random.default_rng(seed + data.next_uid)
    producer = Producer(
        {**settings.transactional_producer_config(f"test-{uuid.uuid4().hex}"), "transaction.timeout.ms": 180_000}
    )  # must be >= delivery.timeout.ms
    producer.init_transactions(30)
    producer.begin_transaction()
    pending: list[tuple[int, np.ndarray, str | None]] = []
    offsets: list[tuple[int, int, np.ndarray, str | None]] = []

    def on_delivery(err, msg):
        assert err is None, err
        _, uids, domain = pending[int(msg.key())]
        offsets.append((msg.partition(), msg.offset(), uids, domain))

    for p in range(data.partitions):
        for _ in range(messages_per_partition):
            n = int(rng.integers(1, 5))
            uids = np.arange(data.next_uid, data.next_uid + n)
            data.next_uid += n
            blocks = (uids[:, None] * 1000 + np.arange(SEQ_LEN)[None, :]).astype(np.uint32)
            domain = str(rng.choice(domains)) if domains else None
            value, headers = encode_message(
                blocks, tokenizer_name="test", tokenizer_hash=tokenizer_hash, source="t", domain=domain
            )
            pending.append((p, uids, domain))
            producer.produce(
                data.topic,
                value=value,
                headers=headers,
                partition=p,
                key=str(len(pending) - 1).encode(),
                on_delivery=on_delivery,
            )
    producer.flush(60)
    if abort:
        producer.abort_transaction(60)
        return []
    producer.commit_transaction(60)
    # commit_transaction returns before the coordinator has written the commit markers to every
    # partition; until it has, read_committed readers (and bounded mode's end offsets) don't see it.
    wait_until_committed_visible(settings, data)
    keys = []
    for p, off, uids, domain in offsets:
        for b, uid in enumerate(uids):
            data.blocks[(p, off, b)] = int(uid)
            if domain is not None:
                data.domains[(p, off, b)] = domain
            keys.append((p, off, b))
    return keys


def wait_until_committed_visible(settings: KafkaSettings, data: TopicData, timeout_s: float = 30.0) -> None:
    from confluent_kafka import IsolationLevel
    from confluent_kafka.admin import OffsetSpec

    admin = settings.make_admin()
    deadline = time.monotonic() + timeout_s
    while True:
        high = end_offsets(settings, data)
        req = {TopicPartition(data.topic, p): OffsetSpec.latest() for p in range(data.partitions)}
        futures = admin.list_offsets(req, isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=10)
        stable = {tp.partition: f.result().offset for tp, f in futures.items()}
        if all(stable[p] >= high[p] for p in high):
            return
        assert time.monotonic() < deadline, f"commit markers not visible after {timeout_s}s: {stable} < {high}"
        time.sleep(0.1)


def produce_raw(settings: KafkaSettings, topic: str, partition: int, value: bytes, headers) -> int:
    producer = settings.make_producer()
    out = []
    producer.produce(
        topic, value=value, headers=headers, partition=partition, on_delivery=lambda err, msg: out.append(msg.offset())
    )
    producer.flush(30)
    return out[0]


def end_offsets(settings: KafkaSettings, data: TopicData) -> dict[int, int]:
    """The partitions' high watermarks. Not the project's read_committed consumer: its watermark is the last stable
    offset (librdkafka >= 1.8 honours isolation.level), which would make the wait above compare the LSO with itself."""
    consumer = settings.make_consumer(overrides={"isolation.level": "read_uncommitted"})
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(data.topic, p), timeout=10)[1]
            for p in range(data.partitions)
        }
    finally:
        consumer.close()
