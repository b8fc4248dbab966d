"""Kafka connection settings, tuned client configs, client factories and topic layout checks.

Plain Python over confluent-kafka; the Dagster `KafkaResource` is a thin wrapper around this.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Literal

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, OffsetSpec
from pydantic import BaseModel, ConfigDict, Field, model_validator

log = logging.getLogger(__name__)

# Throughput defaults (CONVENTIONS.md). Overrides in KafkaSettings win.
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


class KafkaUnavailableError(RuntimeError):
    """The bootstrap servers did not answer a metadata request in time."""


class TopicLayoutMismatch(RuntimeError):
    """An existing topic's layout differs from the one asked for."""


class DeliveryError(RuntimeError):
    def __init__(self, topic: str, partition: int | None, error: Any):
        self.topic = topic
        self.partition = partition
        self.error = error
        where = f"{topic}[{partition}]" if partition is not None and partition >= 0 else topic
        super().__init__(f"delivery to {where} failed: {error}")


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
                f"Kafka not reachable at {self.bootstrap_servers} within {timeout_s:g}s: {_err_str(exc)}"
            ) from None
        return len(md.brokers)


def _err_str(exc: BaseException) -> str:
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0].str()
    return str(exc)


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


# ---------------------------------------------------------------------------------------------
# librdkafka statistics


class KafkaStats:
    """`stats_cb` collector: parses librdkafka statistics JSON and summarises throughput.

    Top-level counters are cumulative, so the latest sample holds the totals; the `batchsize`
    and `rtt` windows reset every interval, so they are combined across samples weighted by count.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.samples = 0
        self._first: dict[str, Any] | None = None
        self._last: dict[str, Any] | None = None
        self._batch_sum = 0.0
        self._batch_cnt = 0
        self._rtt_sum = 0.0
        self._rtt_cnt = 0
        self._rtt_p99_max = 0.0

    def __call__(self, stats_json: str) -> None:
        self.add(json.loads(stats_json))

    def add(self, stats: dict[str, Any]) -> None:
        with self._lock:
            self.samples += 1
            if self._first is None:
                self._first = stats
            self._last = stats
            for topic in (stats.get("topics") or {}).values():
                window = topic.get("batchsize") or {}
                cnt = int(window.get("cnt", 0))
                if cnt:
                    self._batch_sum += float(window.get("avg", 0)) * cnt
                    self._batch_cnt += cnt
            for broker in (stats.get("brokers") or {}).values():
                if broker.get("nodeid", -1) < 0:  # bootstrap and logical (coordinator) handles
                    continue
                window = broker.get("rtt") or {}
                cnt = int(window.get("cnt", 0))
                if cnt:
                    self._rtt_sum += float(window.get("avg", 0)) * cnt
                    self._rtt_cnt += cnt
                    self._rtt_p99_max = max(self._rtt_p99_max, float(window.get("p99", 0)))

    def summary(self) -> dict[str, float | int]:
        with self._lock:
            last = self._last or {}
            first = self._first or {}
            elapsed_s = (last.get("ts", 0) - first.get("ts", 0)) / 1e6
            tx_msgs = int(last.get("txmsgs", 0))
            tx_msg_bytes = int(last.get("txmsg_bytes", 0))
            d_msgs = tx_msgs - int(first.get("txmsgs", 0))
            d_bytes = tx_msg_bytes - int(first.get("txmsg_bytes", 0))
            d_rx = int(last.get("rxmsgs", 0)) - int(first.get("rxmsgs", 0))
            return {
                "samples": self.samples,
                "tx_bytes": int(last.get("tx_bytes", 0)),
                "rx_bytes": int(last.get("rx_bytes", 0)),
                "tx_msgs": tx_msgs,
                "tx_msg_bytes": tx_msg_bytes,
                "rx_msgs": int(last.get("rxmsgs", 0)),
                "rx_msg_bytes": int(last.get("rxmsg_bytes", 0)),
                "batch_size_avg_bytes": self._batch_sum / self._batch_cnt if self._batch_cnt else 0.0,
                "broker_rtt_avg_ms": self._rtt_sum / self._rtt_cnt / 1000 if self._rtt_cnt else 0.0,
                "broker_rtt_p99_ms": self._rtt_p99_max / 1000,
                "tx_msgs_per_s": d_msgs / elapsed_s if elapsed_s > 0 else 0.0,
                "tx_mb_per_s": d_bytes / elapsed_s / 1e6 if elapsed_s > 0 else 0.0,
                "rx_msgs_per_s": d_rx / elapsed_s if elapsed_s > 0 else 0.0,
            }


# ---------------------------------------------------------------------------------------------
# Topics


@dataclass(frozen=True)
class TopicLayout:
    name: str
    partitions: int
    replication_factor: int
    config: dict[str, str]
    created: bool


def ensure_topic(
    admin: AdminClient,
    name: str,
    partitions: int = 8,
    replication_factor: int = 3,
    min_insync_replicas: int = 2,
    config: dict[str, Any] | None = None,
    timeout_s: float = 30.0,
) -> TopicLayout:
    """Create `name` with this layout, or verify that the existing topic has it.

    A mismatch in partitions, replication factor, min.insync.replicas or any given config value
    raises TopicLayoutMismatch listing expected vs actual.
    """
    wanted = {"min.insync.replicas": str(min_insync_replicas), **{k: str(v) for k, v in (config or {}).items()}}
    created = False
    new = NewTopic(name, num_partitions=partitions, replication_factor=replication_factor, config=wanted)
    future = admin.create_topics([new], operation_timeout=timeout_s, request_timeout=timeout_s)[name]
    try:
        future.result(timeout=timeout_s)
        created = True
    except KafkaException as exc:
        err = exc.args[0] if exc.args else None
        if not (isinstance(err, KafkaError) and err.code() == KafkaError.TOPIC_ALREADY_EXISTS):
            raise RuntimeError(f"creating topic {name!r} failed: {_err_str(exc)}") from None

    actual_partitions, actual_rf = _wait_for_leaders(admin, name, timeout_s)
    if created:
        _wait_for_offsets(admin, name, actual_partitions, timeout_s)
    actual_cfg = _describe_topic_config(admin, name, timeout_s)

    diffs = []
    if actual_partitions != partitions:
        diffs.append(f"partitions expected {partitions}, actual {actual_partitions}")
    if actual_rf != replication_factor:
        diffs.append(f"replication_factor expected {replication_factor}, actual {actual_rf}")
    for key, value in wanted.items():
        if actual_cfg.get(key) != value:
            diffs.append(f"{key} expected {value}, actual {actual_cfg.get(key)}")
    if diffs:
        raise TopicLayoutMismatch(f"topic {name!r} exists with a different layout: " + "; ".join(diffs))
    return TopicLayout(name, actual_partitions, actual_rf, {k: actual_cfg[k] for k in wanted}, created)


def _wait_for_leaders(admin: AdminClient, name: str, timeout_s: float) -> tuple[int, int]:
    """Wait until metadata shows every partition with a leader; return (partitions, replication factor)."""
    deadline = time.monotonic() + timeout_s
    while True:
        md = admin.list_topics(topic=name, timeout=timeout_s).topics.get(name)
        ready = (
            md is not None and md.error is None and md.partitions and all(p.leader >= 0 for p in md.partitions.values())
        )
        if ready:
            rf = min(len(p.replicas) for p in md.partitions.values())
            return len(md.partitions), rf
        if time.monotonic() > deadline:
            err = md.error.str() if md is not None and md.error is not None else "no leaders"
            raise RuntimeError(f"topic {name!r} not ready within {timeout_s:g}s: {err}")
        time.sleep(0.2)


def _wait_for_offsets(admin: AdminClient, name: str, partitions: int, timeout_s: float) -> None:
    """Wait until every partition leader answers ListOffsets: metadata can name a leader a moment
    before that broker serves the new partition, and clients reading right away would fail."""
    deadline = time.monotonic() + timeout_s
    pending = {TopicPartition(name, p) for p in range(partitions)}
    while pending:
        futures = admin.list_offsets({tp: OffsetSpec.earliest() for tp in pending}, request_timeout=timeout_s)
        for tp, fut in futures.items():
            try:
                fut.result(timeout=timeout_s)
                pending.discard(tp)
            except KafkaException as exc:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"topic {name!r} partitions not serving within {timeout_s:g}s: {_err_str(exc)}"
                    ) from None
        if pending:
            time.sleep(0.2)


def _describe_topic_config(admin: AdminClient, name: str, timeout_s: float) -> dict[str, str]:
    """Topic configs; retried while a just-created topic has not reached every broker's metadata."""
    resource = ConfigResource(ConfigResource.Type.TOPIC, name)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            entries = admin.describe_configs([resource], request_timeout=timeout_s)[resource].result(timeout=timeout_s)
            return {k: e.value for k, e in entries.items()}
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            retriable = isinstance(err, KafkaError) and err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
            if not retriable or time.monotonic() > deadline:
                raise RuntimeError(f"describing topic {name!r} failed: {_err_str(exc)}") from None
            time.sleep(0.2)
