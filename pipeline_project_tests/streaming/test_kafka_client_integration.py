import os
import time

import pytest
from confluent_kafka.admin import ConfigResource

from pipeline_project.streaming.errors import DeliveryError, TopicLayoutMismatchError
from pipeline_project.streaming.kafka.client import DeliveryTracker, flush_or_raise
from pipeline_project.streaming.kafka.stats import KafkaStats
from pipeline_project.streaming.kafka.topics import ensure_topic

from .kafka_helpers import consume_all, kafka_settings, unique_topic

pytestmark = pytest.mark.stack


def test_cluster_has_three_brokers(stack):
    assert kafka_settings(stack).check_reachable(timeout_s=10) == 3


def test_ensure_topic_creates_rf3_minisr2_and_verifies(stack):
    s = kafka_settings(stack)
    admin = s.make_admin()
    name = unique_topic("layout")
    layout = ensure_topic(admin, name, config={"compression.type": "lz4"})
    assert layout.created
    assert (layout.partitions, layout.replication_factor) == (8, 3)
    assert layout.config == {
        "min.insync.replicas": "2",
        "compression.type": "lz4",
        "retention.ms": "-1",  # explicit: the broker's default would delete blocks after 7 days
        "retention.bytes": "-1",
    }
    md = admin.list_topics(topic=name, timeout=10).topics[name]
    assert len(md.partitions) == 8
    assert all(len(p.replicas) == 3 for p in md.partitions.values())
    res = ConfigResource(ConfigResource.Type.TOPIC, name)
    assert admin.describe_configs([res])[res].result()["min.insync.replicas"].value == "2"

    again = ensure_topic(admin, name, config={"compression.type": "lz4"})
    assert not again.created and again.partitions == 8


def test_ensure_topic_mismatch_is_a_one_line_error(stack):
    admin = kafka_settings(stack).make_admin()
    name = unique_topic("mismatch")
    ensure_topic(admin, name, partitions=4)
    with pytest.raises(TopicLayoutMismatchError) as ei:
        ensure_topic(admin, name, partitions=8, min_insync_replicas=1, config={"cleanup.policy": "compact"})
    msg = str(ei.value)
    assert "\n" not in msg
    assert name in msg
    assert "partitions expected at least 8, actual 4" in msg
    assert "min.insync.replicas expected 1, actual 2" in msg
    assert "cleanup.policy expected compact, actual delete" in msg


def test_a_compacting_or_small_message_token_topic_is_refused_with_the_fix(stack):
    """A topic made by hand for the blocks, compacted and capped at 64 KiB messages: compaction rejects key-less
    block messages mid-batch ("Broker failed to validate record"), and a smaller cap rejects the messages. Both are
    refused up front with the command that fixes them in place, and the fixed topic is accepted."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry

    from pipeline_project.defs.resources.layout import PipelineLayout

    layout = PipelineLayout()
    admin = kafka_settings(stack).make_admin()
    name = unique_topic("compacted")
    ensure_topic(admin, name, config={"cleanup.policy": "compact", "max.message.bytes": 65536})
    with pytest.raises(TopicLayoutMismatchError) as ei:
        ensure_topic(admin, name, config=layout.topic_spec.topic_config(), message_bytes=layout.topic.message_bytes)
    msg = str(ei.value)
    assert "cleanup.policy expected delete, actual compact" in msg
    assert "max.message.bytes expected at least 148480 (messages of 131072 bytes), actual 65536" in msg
    fix = "--add-config cleanup.policy=delete,max.message.bytes=148480"
    assert fix in msg, msg

    res = ConfigResource(ConfigResource.Type.TOPIC, name, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
        for k, v in (("cleanup.policy", "delete"), ("max.message.bytes", "148480"))
    ])  # fmt: skip
    admin.incremental_alter_configs([res])[res].result(timeout=30)
    # the brokers apply a topic's new config a moment after the controller (KRaft): a describe right away can
    # answer the old one, so ask until it shows
    deadline = time.monotonic() + 30
    while True:
        try:
            fixed = ensure_topic(
                admin, name, config=layout.topic_spec.topic_config(), message_bytes=layout.topic.message_bytes
            )
            break
        except TopicLayoutMismatchError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    assert fixed.config["cleanup.policy"] == "delete" and not fixed.created


def test_idempotent_produce_and_stats(stack):
    s = kafka_settings(stack, statistics_interval_ms=100)
    topic = unique_topic("idem")
    ensure_topic(s.make_admin(), topic)
    stats = KafkaStats()
    producer = s.make_producer(stats=stats)
    tracker = DeliveryTracker()
    values = [f"m{i:04d}".encode() * 100 for i in range(400)]
    for i, v in enumerate(values):
        producer.produce(topic, value=v, partition=i % 8, on_delivery=tracker.on_delivery)
        producer.poll(0)
    flush_or_raise(producer, tracker, 30)
    import time

    time.sleep(0.3)
    producer.poll(0.2)  # serve a stats callback after delivery
    assert tracker.delivered == 400
    ranges = tracker.partition_ranges(topic)
    assert ranges == {p: (0, 49) for p in range(8)}  # idempotence: no duplicates, contiguous offsets
    got = consume_all(s, topic)
    assert sorted(m.value() for m in got) == sorted(values)
    summary = stats.summary()
    assert summary["samples"] >= 1
    assert summary["tx_msgs"] == 400
    assert summary["broker_rtt_avg_ms"] > 0
    assert summary["batch_size_avg_bytes"] > 0


def test_transactions_commit_visible_abort_invisible(stack):
    s = kafka_settings(stack)
    topic = unique_topic("tx")
    ensure_topic(s.make_admin(), topic, partitions=2)
    p = s.make_transactional_producer(f"test-tx-{topic}")
    p.begin_transaction()
    for i in range(10):
        p.produce(topic, value=b"aborted-%d" % i, partition=i % 2)
    p.flush(10)
    p.abort_transaction(10)
    p.begin_transaction()
    for i in range(5):
        p.produce(topic, value=b"committed-%d" % i, partition=i % 2)
    p.commit_transaction(10)

    committed = [m.value() for m in consume_all(s, topic, isolation="read_committed")]
    assert sorted(committed) == sorted(b"committed-%d" % i for i in range(5))
    uncommitted = [m.value() for m in consume_all(s, topic, isolation="read_uncommitted")]
    assert sum(v.startswith(b"aborted") for v in uncommitted) == 10  # they were written, then aborted


def test_delivery_failure_raises_with_topic_and_partition(stack):
    s = kafka_settings(stack, producer_overrides={"compression.type": "none"})
    topic = unique_topic("toolarge")
    ensure_topic(s.make_admin(), topic, partitions=1, config={"max.message.bytes": 1024})
    producer = s.make_producer()
    tracker = DeliveryTracker()
    producer.produce(topic, value=os.urandom(64 * 1024), partition=0, on_delivery=tracker.on_delivery)
    with pytest.raises(DeliveryError) as ei:
        flush_or_raise(producer, tracker, 30)
    assert ei.value.topic == topic and ei.value.partition == 0
    assert topic in str(ei.value) and "large" in str(ei.value).lower()
