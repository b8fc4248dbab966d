"""Settings that would break exactly-once are refused with one line (pure logic, no brokers)."""

from __future__ import annotations

import pytest

from pipeline_project.streaming.kafka.client import (
    CONSUMER_DEFAULTS,
    PRODUCER_DEFAULTS,
    KafkaSettings,
    transactional_id_for,
)
from pipeline_project.streaming.kafka.policy import CONSUMER_RULES, PRODUCER_RULES, UnsafeKafkaConfigError

UNSAFE_PRODUCER = [
    ({"transactional.id": "fixed"}, "transactional.id"),
    ({"enable.idempotence": False}, "enable.idempotence"),
    ({"enable.idempotence": "false"}, "enable.idempotence"),
    ({"acks": 1}, "acks"),
    ({"acks": "0"}, "acks"),
    ({"request.required.acks": "1"}, "request.required.acks"),
    ({"retries": 0}, "retries"),
    ({"message.send.max.retries": "0"}, "message.send.max.retries"),
    ({"max.in.flight.requests.per.connection": 6}, "max.in.flight.requests.per.connection"),
    ({"max.in.flight": "100"}, "max.in.flight"),
    ({"queuing.strategy": "lifo"}, "queuing.strategy"),
    ({"bootstrap.servers": "other:9092"}, "bootstrap.servers"),
    ({"metadata.broker.list": "other:9092"}, "metadata.broker.list"),
    ({"default.topic.config": {"acks": 1}}, "acks"),
]
UNSAFE_CONSUMER = [
    ({"isolation.level": "read_uncommitted"}, "isolation.level"),
    ({"isolation.level": "READ-COMMITTED"}, "isolation.level"),
    ({"enable.auto.commit": True}, "enable.auto.commit"),
    ({"enable.auto.commit": "true"}, "enable.auto.commit"),
    ({"auto.commit.enable": "true"}, "auto.commit.enable"),
    ({"auto.offset.reset": "latest"}, "auto.offset.reset"),
    ({"auto.offset.reset": "largest"}, "auto.offset.reset"),
    ({"bootstrap.servers": "other:9092"}, "bootstrap.servers"),
]


@pytest.mark.parametrize(("overrides", "name"), UNSAFE_PRODUCER)
def test_producer_overrides_that_break_exactly_once_are_refused(overrides, name):
    with pytest.raises(UnsafeKafkaConfigError, match=f"producer_overrides {name}=") as info:
        KafkaSettings(bootstrap_servers="b:1", producer_overrides=overrides)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(("overrides", "name"), UNSAFE_CONSUMER)
def test_consumer_overrides_that_break_exactly_once_are_refused(overrides, name):
    with pytest.raises(UnsafeKafkaConfigError, match=f"consumer_overrides {name}=") as info:
        KafkaSettings(bootstrap_servers="b:1", consumer_overrides=overrides)
    assert "\n" not in str(info.value)


def test_safe_overrides_and_the_defaults_pass():
    s = KafkaSettings(
        bootstrap_servers="b:1",
        producer_overrides={"acks": -1, "enable.idempotence": "true", "linger.ms": 5, "max.in.flight": 5,
                            "compression.type": "zstd", "retries": 10},
        consumer_overrides={"isolation.level": "read_committed", "enable.auto.commit": False,
                            "auto.offset.reset": "smallest", "fetch.wait.max.ms": 10},
    )  # fmt: skip
    assert s.consumer_config()["isolation.level"] == "read_committed"
    # the project's own defaults obey its rules (a default that broke them would be refused as an override too)
    KafkaSettings(bootstrap_servers="b:1", producer_overrides=PRODUCER_DEFAULTS, consumer_overrides=CONSUMER_DEFAULTS)


SAFE = {"transactional.id": "t", "enable.idempotence": "true", "acks": "all", "request.required.acks": "all",
        "retries": "3", "message.send.max.retries": "3", "max.in.flight.requests.per.connection": "5",
        "max.in.flight": "5", "queuing.strategy": "fifo", "isolation.level": "read_committed",
        "enable.auto.commit": "false", "auto.commit.enable": "false", "auto.offset.reset": "earliest",
        "bootstrap.servers": "127.0.0.1:1", "metadata.broker.list": "127.0.0.1:1"}  # fmt: skip


@pytest.mark.parametrize("kind", ["producer", "consumer"])
def test_every_rule_names_a_property_librdkafka_knows(kind):
    from confluent_kafka import Consumer, Producer

    rules, make = (PRODUCER_RULES, Producer) if kind == "producer" else (CONSUMER_RULES, Consumer)
    for name in rules:
        client = make({"bootstrap.servers": "127.0.0.1:1", "group.id": "g", name: SAFE[name]})  # unknown: raises
        client.close() if kind == "consumer" else client.flush(0)


@pytest.mark.parametrize("field", ["client_id", "transactional_id_prefix"])
@pytest.mark.parametrize("value", ["", "  ", "has space"])
def test_an_empty_or_blank_identity_is_refused(field, value):
    with pytest.raises(UnsafeKafkaConfigError, match=f"{field}="):
        KafkaSettings(bootstrap_servers="b:1", **{field: value})


def test_the_transactional_id_does_not_depend_on_the_client_id():
    """A per-process client_id (a host name, a rank) must not change a batch's transactional id between attempts:
    the retry's init_transactions would then not fence the earlier attempt's zombie."""
    a = KafkaSettings(bootstrap_servers="b:1", client_id="worker-host-a")
    b = KafkaSettings(bootstrap_servers="b:1", client_id="worker-host-b")
    assert (
        transactional_id_for(a, "t", "batch-1")
        == transactional_id_for(b, "t", "batch-1")
        == "pipeline-project.t.batch-1"
    )
    assert transactional_id_for(a, "t", "batch-1") != transactional_id_for(a, "t", "batch-2")
    c = KafkaSettings(bootstrap_servers="b:1", transactional_id_prefix="team-x")
    assert transactional_id_for(c, "t", "batch-1") == "team-x.t.batch-1"
