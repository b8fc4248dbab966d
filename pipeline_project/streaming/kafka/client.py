"""Kafka connection settings, tuned client configs, client factories and delivery tracking.

Plain Python over confluent-kafka; the Dagster `KafkaResource` is a thin wrapper around this.
Topic layout lives in `topics`, librdkafka statistics in `kafka_stats`; both are re-exported here.
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass, field
from typing import Any, Literal

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient
from pydantic import BaseModel, ConfigDict, Field, model_validator

from pipeline_project.streaming.errors import DeliveryError, KafkaUnavailableError, kafka_error_text
from pipeline_project.streaming.kafka.policy import check_identity, check_overrides
from pipeline_project.streaming.kafka.stats import KafkaStats
from pipeline_project.streaming.kafka.topics import TopicLayout, ensure_topic

__all__ = [
    "CONSUMER_DEFAULTS",
    "PRODUCER_DEFAULTS",
    "TRANSACTIONAL_DEFAULTS",
    "DeliveryError",
    "DeliveryTracker",
    "KafkaAuthenticationError",
    "KafkaRefusedError",
    "KafkaSettings",
    "KafkaStats",
    "KafkaTLSError",
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

# An admin client keeps one connection and sends every request over it: to a broker host that was cut off, its
# metadata and describe requests hung until librdkafka's socket.timeout.ms (60 s) ended the connection, failing
# ensure_topic's 20-30 s calls. 10 s ends that connection sooner; the next attempt goes to a reachable broker.
# Admin operations with their own request_timeout (CreateTopics, ListOffsets, ...) are not capped by it.
ADMIN_DEFAULTS: dict[str, Any] = {"socket.timeout.ms": 10_000}


SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]


class KafkaRefusedError(KafkaUnavailableError):
    """The brokers answered and refused this client: retrying with the same settings cannot help."""


class KafkaAuthenticationError(KafkaRefusedError):
    """The SASL login was refused: wrong user or password, or a mechanism the listener does not enable."""


class KafkaTLSError(KafkaRefusedError):
    """The TLS handshake failed, typically a broker certificate the configured CA did not sign."""


# librdkafka's "(after 12ms in state AUTH_REQ, 1 identical error(s) suppressed)" tail says nothing to a user
_LIBRDKAFKA_TIMING = re.compile(r"\s*\(after \d+ms in state [^)]*\)")


# ... nor does the "sasl_ssl://127.0.0.1:19092/bootstrap: " a report starts with, when the message names the servers
_LIBRDKAFKA_BROKER = re.compile(r"^\S+://\S+/(?:bootstrap|\d+): ")


def _client_error_text(text: str) -> str:
    return _LIBRDKAFKA_BROKER.sub("", _LIBRDKAFKA_TIMING.sub("", text).strip())


class _ClientReports(logging.Handler):
    """What one client's librdkafka reported: its errors (error_cb) and log lines, which also reach `log`."""

    def __init__(self) -> None:
        super().__init__()
        self.errors: list[KafkaError] = []
        self.lines: list[str] = []
        self.logger = logging.Logger(f"{__name__}.check", logging.DEBUG)  # sees every line, passes on what `log` wants
        self.logger.addHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())
        if log.isEnabledFor(record.levelno):
            log.handle(record)


class KafkaSettings(BaseModel):
    """How to reach Kafka. Secrets are plain strings here; the Dagster resource feeds them from EnvVar.

    SASL_SSL logs in with `sasl_mechanism` (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512) and verifies the brokers'
    certificates against `ssl_ca_location` (a PEM file), or the system CA store when it is unset.

    Overrides that would break exactly-once (`client_policy`: read_uncommitted, auto commit, acks other than
    all, no idempotence, a fixed transactional.id, ...) and an empty `client_id` or `transactional_id_prefix`
    are refused with one line (UnsafeKafkaConfigError).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    bootstrap_servers: str
    client_id: str = "pipeline-project"
    # transactional ids are `<prefix>.<topic>.<ledger key>`: the same for every writer of a topic (client_policy)
    transactional_id_prefix: str = "pipeline-project"
    security_protocol: Literal["PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: SaslMechanism = "SCRAM-SHA-512"
    sasl_username: str | None = None
    sasl_password: str | None = Field(default=None, repr=False)
    ssl_ca_location: str | None = None
    producer_overrides: dict[str, Any] = Field(default_factory=dict)
    consumer_overrides: dict[str, Any] = Field(default_factory=dict)
    statistics_interval_ms: int = Field(default=0, ge=0)

    @model_validator(mode="after")
    def _keeps_exactly_once(self) -> KafkaSettings:
        check_identity("client_id", self.client_id)
        check_identity("transactional_id_prefix", self.transactional_id_prefix)
        check_overrides("producer", self.producer_overrides)
        check_overrides("consumer", self.consumer_overrides)
        return self

    @model_validator(mode="after")
    def _sasl_needs_credentials(self) -> KafkaSettings:
        if self.security_protocol == "SASL_SSL" and not (self.sasl_username and self.sasl_password):
            raise ValueError("security_protocol SASL_SSL needs sasl_username and sasl_password")
        return self

    @classmethod
    def from_settings(cls, settings: Any, **kwargs: Any) -> KafkaSettings:
        """Build from `pipeline_project.settings.Settings` (anything with `kafka_bootstrap`), its security fields
        included when set. The SASL password is never in `Settings`: pass `sasl_password=` (from the environment)."""
        given = {
            name: getattr(settings, f"kafka_{name}", None)
            for name in ("security_protocol", "sasl_mechanism", "sasl_username", "ssl_ca_location")
        }
        return cls(bootstrap_servers=settings.kafka_bootstrap, **{**{k: v for k, v in given.items() if v}, **kwargs})

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
        return {**self.common_config(), **ADMIN_DEFAULTS}

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
        self, transactional_id: str, stats: KafkaStats | None = None, timeout_s: float = 180.0
    ) -> Producer:
        """A producer with its transactions initialised. A retriable failure of `init_transactions` (the transaction
        coordinator moving off an unreachable broker host: "coordinator load in progress", a timeout) is retried,
        as librdkafka's API allows, until `timeout_s` in all; a fatal one, or the last, is raised. The default is
        the producers' transaction timeout: on a loaded cluster a healed broker's coordinator was seen loading its
        transaction state for over a minute, and giving up earlier only turns that wait into a step retry."""
        producer = Producer({**self.transactional_producer_config(transactional_id), **self._callbacks(stats)})
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                producer.init_transactions(max(0.1, deadline - time.monotonic()))
                return producer
            except KafkaException as exc:
                err = exc.args[0] if exc.args else None
                if not (isinstance(err, KafkaError) and err.retriable()) or time.monotonic() >= deadline:
                    raise
                log.warning("init_transactions of %s: %s; retrying", transactional_id, err.str())
                time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))

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
        """Return the number of live brokers, or raise one line saying why not.

        Refusals are raised as soon as librdkafka reports them, as a KafkaRefusedError: KafkaAuthenticationError
        for a refused login (naming user and mechanism), KafkaTLSError for a failed TLS handshake (naming the CA
        file), KafkaRefusedError itself for a listener that hangs up on this client's security protocol.
        Anything else that keeps the brokers from answering within `timeout_s` raises KafkaUnavailableError.
        """
        seen = _ClientReports()
        admin = AdminClient({**self.admin_config(), "logger": seen.logger, "error_cb": seen.errors.append})
        deadline = time.monotonic() + timeout_s
        while True:
            remaining = deadline - time.monotonic()
            try:
                return len(admin.list_topics(timeout=max(0.1, min(1.0, remaining))).brokers)
            except KafkaException as exc:
                last = exc
            admin.poll(0)  # serves error_cb and the log queue: why a handshake or login failed
            refused = self._refusal(seen)
            if refused is not None:
                raise refused from None
            if remaining <= 1.0:
                break
        reason = kafka_error_text(last)
        if seen.errors:
            reason += f" ({_client_error_text(seen.errors[-1].str())})"
        raise KafkaUnavailableError(f"Kafka not reachable at {self.bootstrap_servers} within {timeout_s:g}s: {reason}")

    def _refusal(self, seen: _ClientReports) -> KafkaRefusedError | None:
        """The error for a login, handshake or protocol the brokers refused, if librdkafka has reported one."""
        where = f"Kafka at {self.bootstrap_servers}"
        for err in seen.errors:
            text = _client_error_text(err.str())
            if err.code() in (KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED):
                return KafkaAuthenticationError(
                    f"{where} refused the SASL {self.sasl_mechanism} login of user {self.sasl_username!r}: {text}"
                )
            if err.code() == KafkaError._SSL:
                if "verify failed" not in text:
                    trust = f"trusting ssl_ca_location {self.ssl_ca_location or '(unset: the system CA store)'}"
                elif self.ssl_ca_location:
                    trust = (
                        f"the broker's certificate is not signed by the CA in ssl_ca_location {self.ssl_ca_location}"
                    )
                else:
                    trust = "the broker's certificate is not signed by a CA of the system store (ssl_ca_location unset)"
                return KafkaTLSError(f"TLS handshake with {where} failed, {trust}: {text}")
        if self.security_protocol == "PLAINTEXT" and any(
            "Disconnected" in line and "in state APIVERSION_QUERY" in line for line in seen.lines
        ):
            return KafkaRefusedError(
                f"{where} hung up on a PLAINTEXT client at its first request: the listener wants another security "
                "protocol (SASL_SSL?); set security_protocol (KAFKA_SECURITY_PROTOCOL) and the SASL settings"
            )
        return None


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
            self.failures.append(DeliveryError(msg.topic(), msg.partition(), err.str(), kafka_error=err))
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


def transactional_id_for(settings: KafkaSettings, topic: str, ledger_key: str) -> str:
    """Stable per batch across retries (fences an earlier attempt's zombie), distinct per batch (`policy`)."""
    return f"{settings.transactional_id_prefix}.{topic}.{ledger_key}"
