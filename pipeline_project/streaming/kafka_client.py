"""Kafka connection settings, tuned client configs, client factories and delivery tracking.

Plain Python over confluent-kafka; the Dagster `KafkaResource` is a thin wrapper around this.
Topic layout lives in `topics`, librdkafka statistics in `kafka_stats`; both are re-exported here.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Literal

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient
from pydantic import BaseModel, ConfigDict, Field, model_validator

from pipeline_project.streaming.errors import DeliveryError, KafkaUnavailableError, kafka_error_text
from pipeline_project.streaming.kafka_stats import KafkaStats
from pipeline_project.streaming.topics import TopicLayout, ensure_topic

__all__ = [
    "CONSUMER_DEFAULTS",
    "PRODUCER_DEFAULTS",
    "TRANSACTIONAL_DEFAULTS",
    "DeliveryError",
    "DeliveryTracker",
    "KafkaSettings",
    "KafkaStats",
    "KafkaUnavailableError",
    "TopicLayout",
    "ensure_topic",
    "flush_or_raise",
]

log = logging.getLogger(__name__)

# Throughput and safety defaults: idempotent, acks=all, linger >= 50 ms, ~1 MiB batches, lz4. Overrides in KafkaSettings win.
PRODUCER_DEFAULTS: dict[str, Any] = {
    "enable.idempotence": True,
    "acks": "all",
    "linger.ms": 50,
    "batch.size": 1 << 20,
    "compression.type": "lz4",
    "message.max.bytes": 1 << 20,
    "queue.buffering.max.kbytes": 1 << 20,
    "delivery.timeout.ms": 120_000,
}
# librdkafka requires delivery.timeout.ms <= transaction.timeout.ms; brokers cap it at 15 min by default.
TRANSACTIONAL_DEFAULTS: dict[str, Any] = {"transaction.timeout.ms": 300_000}
CONSUMER_DEFAULTS: dict[str, Any] = {
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "isolation.level": "read_committed",
    "auto.offset.reset": "earliest",
    "fetch.min.bytes": 1,
    "fetch.wait.max.ms": 100,
    "fetch.max.bytes": 64 << 20,
    "max.partition.fetch.bytes": 8 << 20,
    "queued.max.messages.kbytes": 256 << 10,
}


class KafkaSettings(BaseModel):
    """How to reach Kafka. Secrets are plain strings here; the Dagster resource feeds them from EnvVar."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    bootstrap_servers: str
    client_id: str = "pipeline-project"
    security_protocol: Literal["PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: Literal["SCRAM-SHA-256", "SCRAM-SHA-512"] = "SCRAM-SHA-512"
    sasl_username: str | None = None
    sasl_password: str | None = Field(default=None, repr=False)
    ssl_ca_location: str | None = None
    producer_overrides: dict[str, Any] = Field(default_factory=dict)
    consumer_overrides: dict[str, Any] = Field(default_factory=dict)
    statistics_interval_ms: int = Field(default=0, ge=0)

    @model_validator(mode="after")
    def _sasl_needs_credentials(self) -> KafkaSettings:
        if self.security_protocol == "SASL_SSL" and not (self.sasl_username and self.sasl_password):
            raise ValueError("security_protocol SASL_SSL needs sasl_username and sasl_password")
        return self

    @classmethod
    def from_settings(cls, settings: Any, **kwargs: Any) -> KafkaSettings:
        """Build from `pipeline_project.settings.Settings` (anything with `kafka_bootstrap`)."""
        return cls(bootstrap_servers=settings.kafka_bootstrap, **kwargs)

    def common_config(self) -> dict[str, Any]:
        cfg: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap_servers,
            "client.id": self.client_id,
            "security.protocol": self.security_protocol,
        }
        if self.security_protocol == "SASL_SSL":
            cfg["sasl.mechanism"] = self.sasl_mechanism
            cfg["sasl.username"] = self.sasl_username
            cfg["sasl.password"] = self.sasl_password
            if self.ssl_ca_location:
                cfg["ssl.ca.location"] = self.ssl_ca_location
        if self.statistics_interval_ms:
            cfg["statistics.interval.ms"] = self.statistics_interval_ms
        return cfg

    def producer_config(self) -> dict[str, Any]:
        return {**self.common_config(), **PRODUCER_DEFAULTS, **self.producer_overrides}

    def transactional_producer_config(self, transactional_id: str) -> dict[str, Any]:
        if not transactional_id:
            raise ValueError("transactional_id must be a non-empty string")
        return {
            **self.common_config(),
            **PRODUCER_DEFAULTS,
            **TRANSACTIONAL_DEFAULTS,
            **self.producer_overrides,
            "transactional.id": transactional_id,
        }

    def consumer_config(self, group_id: str | None = None) -> dict[str, Any]:
        # confluent-kafka insists on a group.id even for assign()-only consumers that never commit.
        group = group_id or f"{self.client_id}.assign-only"
        return {**self.common_config(), **CONSUMER_DEFAULTS, "group.id": group, **self.consumer_overrides}

    def admin_config(self) -> dict[str, Any]:
        return self.common_config()

    def _callbacks(self, stats: KafkaStats | None) -> dict[str, Any]:
        cb: dict[str, Any] = {"logger": log, "error_cb": _log_client_error}
        if stats is not None:
            if not self.statistics_interval_ms:
                raise ValueError("a KafkaStats collector needs statistics_interval_ms > 0")
            cb["stats_cb"] = stats
        return cb

    def make_producer(self, stats: KafkaStats | None = None) -> Producer:
        return Producer({**self.producer_config(), **self._callbacks(stats)})

    def make_transactional_producer(
        self, transactional_id: str, stats: KafkaStats | None = None, timeout_s: float = 30.0
    ) -> Producer:
        producer = Producer({**self.transactional_producer_config(transactional_id), **self._callbacks(stats)})
        producer.init_transactions(timeout_s)
        return producer

    def make_consumer(
        self,
        group_id: str | None = None,
        *,
        stats: KafkaStats | None = None,
        overrides: dict[str, Any] | None = None,
    ) -> Consumer:
        return Consumer({**self.consumer_config(group_id), **(overrides or {}), **self._callbacks(stats)})

    def make_admin(self) -> AdminClient:
        return AdminClient({**self.admin_config(), "logger": log, "error_cb": _log_client_error})

    def check_reachable(self, timeout_s: float = 10.0) -> int:
        """Return the number of live brokers, or raise KafkaUnavailableError in one line."""
        admin = self.make_admin()
        try:
            md = admin.list_topics(timeout=timeout_s)
        except KafkaException as exc:
            raise KafkaUnavailableError(
                f"Kafka not reachable at {self.bootstrap_servers} within {timeout_s:g}s: {kafka_error_text(exc)}"
            ) from None
        return len(md.brokers)


def _log_client_error(err: KafkaError) -> None:
    log.warning("kafka client error: %s", err.str())


# ---------------------------------------------------------------------------------------------
# Delivery tracking


@dataclass
class DeliveryTracker:
    """Delivery-report callback that records per-partition offset ranges and failures.

    Pass `tracker.on_delivery` as `on_delivery=` to `Producer.produce`; call `raise_for_failures()`
    (or `flush_or_raise`) before committing.
    """

    offsets: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)
    delivered: int = 0
    delivered_bytes: int = 0
    failures: list[DeliveryError] = field(default_factory=list)

    def on_delivery(self, err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            self.failures.append(DeliveryError(msg.topic(), msg.partition(), err.str()))
            return
        key = (msg.topic(), msg.partition())
        off = msg.offset()
        lo, hi = self.offsets.get(key, (off, off))
        self.offsets[key] = (min(lo, off), max(hi, off))
        self.delivered += 1
        self.delivered_bytes += len(msg.value() or b"")

    def partition_ranges(self, topic: str) -> dict[int, tuple[int, int]]:
        return {p: rng for (t, p), rng in sorted(self.offsets.items()) if t == topic}

    def raise_for_failures(self) -> None:
        if self.failures:
            first = self.failures[0]
            if len(self.failures) > 1:
                first.args = (f"{first.args[0]} (and {len(self.failures) - 1} more failed deliveries)",)
            raise first


def flush_or_raise(producer: Producer, tracker: DeliveryTracker, timeout_s: float = 120.0) -> None:
    """Flush, then raise the first recorded DeliveryError; a timeout with messages left also raises."""
    remaining = producer.flush(timeout_s)
    tracker.raise_for_failures()
    if remaining:
        raise DeliveryError("<pending>", None, f"{remaining} messages still undelivered after {timeout_s:g}s")
