import json

import pytest
from pydantic import ValidationError

from pipeline_project.streaming.errors import DeliveryError, KafkaUnavailableError
from pipeline_project.streaming.kafka.client import DeliveryTracker, KafkaSettings
from pipeline_project.streaming.kafka.stats import KafkaStats

from .kafka_helpers import DeliveredMessage


def test_producer_config_has_throughput_and_safety_defaults():
    cfg = KafkaSettings(bootstrap_servers="a:1,b:2").producer_config()
    assert cfg["bootstrap.servers"] == "a:1,b:2"
    assert cfg["client.id"] == "pipeline-project"
    assert cfg["enable.idempotence"] is True
    assert cfg["acks"] == "all"
    assert cfg["linger.ms"] >= 50
    assert cfg["batch.size"] == 1 << 20
    assert cfg["compression.type"] in ("lz4", "zstd")
    assert "statistics.interval.ms" not in cfg


def test_overrides_win_and_stay_scoped():
    s = KafkaSettings(
        bootstrap_servers="a:1",
        producer_overrides={"linger.ms": 5, "compression.type": "zstd"},
        consumer_overrides={"fetch.max.bytes": 1234},
        statistics_interval_ms=1000,
    )
    p = s.producer_config()
    c = s.consumer_config()
    assert (p["linger.ms"], p["compression.type"]) == (5, "zstd")
    assert c["fetch.max.bytes"] == 1234
    assert "fetch.max.bytes" not in p and "linger.ms" not in c
    assert p["statistics.interval.ms"] == c["statistics.interval.ms"] == 1000


def test_transactional_config_sets_id_and_keeps_idempotence():
    cfg = KafkaSettings(bootstrap_servers="a:1").transactional_producer_config("kafka_topic/2024-01")
    assert cfg["transactional.id"] == "kafka_topic/2024-01"
    assert cfg["enable.idempotence"] is True and cfg["acks"] == "all"
    assert cfg["delivery.timeout.ms"] <= cfg["transaction.timeout.ms"]  # librdkafka refuses otherwise
    assert "transaction.timeout.ms" not in KafkaSettings(bootstrap_servers="a:1").producer_config()
    with pytest.raises(ValueError):
        KafkaSettings(bootstrap_servers="a:1").transactional_producer_config("")


def test_consumer_config_read_committed_no_autocommit():
    s = KafkaSettings(bootstrap_servers="a:1")
    cfg = s.consumer_config()
    assert cfg["enable.auto.commit"] is False
    assert cfg["isolation.level"] == "read_committed"
    assert cfg["max.partition.fetch.bytes"] >= 1 << 20
    assert cfg["group.id"]  # confluent-kafka requires one even for assign()
    assert s.consumer_config("trainer")["group.id"] == "trainer"


def test_sasl_ssl_config_and_validation():
    s = KafkaSettings(
        bootstrap_servers="k:9096",
        security_protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-256",
        sasl_username="u",
        sasl_password="secret",
        ssl_ca_location="/etc/ca.pem",
    )
    cfg = s.admin_config()
    assert cfg["security.protocol"] == "SASL_SSL"
    assert cfg["sasl.mechanism"] == "SCRAM-SHA-256"
    assert (cfg["sasl.username"], cfg["sasl.password"], cfg["ssl.ca.location"]) == ("u", "secret", "/etc/ca.pem")
    assert "secret" not in repr(s)
    plain = KafkaSettings(bootstrap_servers="k:1").admin_config()
    assert "sasl.username" not in plain and plain["security.protocol"] == "PLAINTEXT"
    with pytest.raises(ValidationError, match="sasl_username"):
        KafkaSettings(bootstrap_servers="k:1", security_protocol="SASL_SSL")
    with pytest.raises(ValidationError):
        KafkaSettings(bootstrap_servers="k:1", security_protocol="SSL")


def test_stats_collector_needs_interval():
    with pytest.raises(ValueError, match="statistics_interval_ms"):
        KafkaSettings(bootstrap_servers="127.0.0.1:1").make_producer(stats=KafkaStats())


def test_check_reachable_unreachable_is_one_line_naming_servers():
    s = KafkaSettings(bootstrap_servers="127.0.0.1:1,127.0.0.1:2")
    with pytest.raises(KafkaUnavailableError) as ei:
        s.check_reachable(timeout_s=1.0)
    msg = str(ei.value)
    assert "127.0.0.1:1,127.0.0.1:2" in msg
    assert "\n" not in msg


def _stats(ts_us, txmsgs, txmsg_bytes, batch=None, rtt=None):
    return json.dumps(
        {
            "ts": ts_us,
            "tx_bytes": txmsg_bytes + 100,
            "rx_bytes": 50,
            "txmsgs": txmsgs,
            "txmsg_bytes": txmsg_bytes,
            "rxmsgs": 0,
            "rxmsg_bytes": 0,
            "topics": {"t": {"batchsize": batch or {"cnt": 0}}},
            "brokers": {
                "127.0.0.1:19092/1": {"nodeid": 1, "rtt": rtt or {"cnt": 0}},
                "GroupCoordinator": {"nodeid": -1, "rtt": {"cnt": 9, "avg": 10**9, "p99": 10**9}},
            },
        }
    )


def test_kafka_stats_summary_combines_windows_and_rates():
    st = KafkaStats()
    st(_stats(1_000_000, 0, 0))
    st(_stats(2_000_000, 100, 50_000_000, batch={"cnt": 10, "avg": 1000}, rtt={"cnt": 4, "avg": 2000, "p99": 5000}))
    st(_stats(3_000_000, 300, 150_000_000, batch={"cnt": 30, "avg": 3000}, rtt={"cnt": 4, "avg": 4000, "p99": 9000}))
    s = st.summary()
    assert s["samples"] == 3
    assert s["tx_msgs"] == 300
    assert s["tx_msgs_per_s"] == pytest.approx(150.0)
    assert s["tx_mb_per_s"] == pytest.approx(75.0)
    assert s["batch_size_avg_bytes"] == pytest.approx((10 * 1000 + 30 * 3000) / 40)
    assert s["broker_rtt_avg_ms"] == pytest.approx(3.0)  # coordinator handle ignored
    assert s["broker_rtt_p99_ms"] == pytest.approx(9.0)


class _Err:
    def str(self):
        return "Broker: Message size too large"


def test_delivery_tracker_ranges_and_failures_raise():
    tr = DeliveryTracker()
    for p, o in [(0, 5), (0, 3), (1, 10), (0, 4)]:
        tr.on_delivery(None, DeliveredMessage("t", p, o))
    tr.on_delivery(None, DeliveredMessage("t.ledger", 0, 7))
    assert tr.partition_ranges("t") == {0: (3, 5), 1: (10, 10)}
    assert tr.delivered == 5 and tr.delivered_bytes == 10
    tr.raise_for_failures()  # nothing failed yet
    tr.on_delivery(_Err(), DeliveredMessage("t", 2, -1))
    tr.on_delivery(_Err(), DeliveredMessage("t", 3, -1))
    with pytest.raises(DeliveryError) as ei:
        tr.raise_for_failures()
    assert (ei.value.topic, ei.value.partition) == ("t", 2)
    assert "too large" in str(ei.value) and "1 more" in str(ei.value)
