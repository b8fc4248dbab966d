"""`make_transactional_producer` retries a retriable `init_transactions` failure (the transaction coordinator moving
off a broker host that was cut off: COORDINATOR_LOAD_IN_PROGRESS, a timeout) within its budget; a fatal one, or
the budget spent, raises. Pure logic with a stand-in Producer; the real cut is cluster/test_broker_faults.py."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from pipeline_project.streaming.kafka import client as kafka_client
from pipeline_project.streaming.kafka.client import KafkaSettings


def _fake(failures: list[KafkaError]):
    calls: list[float] = []

    class FakeProducer:
        def __init__(self, config):
            self.config = config

        def init_transactions(self, timeout):
            calls.append(timeout)
            if failures:
                raise KafkaException(failures.pop(0))

    return FakeProducer, calls


def test_a_retriable_init_failure_is_retried(monkeypatch):
    load = KafkaError(KafkaError.COORDINATOR_LOAD_IN_PROGRESS, "Failed to initialize Producer ID", retriable=True)
    fake, calls = _fake([load, KafkaError(KafkaError._TIMED_OUT, "timed out", retriable=True)])
    monkeypatch.setattr(kafka_client, "Producer", fake)
    KafkaSettings(bootstrap_servers="b:9092").make_transactional_producer("tx", timeout_s=30)
    assert len(calls) == 3 and all(0 < t <= 30 for t in calls)


def test_a_fatal_init_failure_or_a_spent_budget_raises(monkeypatch):
    fenced = KafkaError(KafkaError._FENCED, "fenced", fatal=True)
    fake, calls = _fake([fenced])
    monkeypatch.setattr(kafka_client, "Producer", fake)
    with pytest.raises(KafkaException, match="fenced"):
        KafkaSettings(bootstrap_servers="b:9092").make_transactional_producer("tx", timeout_s=30)
    assert len(calls) == 1
    fake, calls = _fake([KafkaError(KafkaError._TIMED_OUT, "timed out", retriable=True)] * 100)
    monkeypatch.setattr(kafka_client, "Producer", fake)
    with pytest.raises(KafkaException, match="timed out"):
        KafkaSettings(bootstrap_servers="b:9092").make_transactional_producer("tx", timeout_s=0.3)
