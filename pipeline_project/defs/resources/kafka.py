"""Kafka as a Dagster resource: configuration and client factories over `streaming.kafka_client`.

The resource declares only what a deployment sets; every default lives in `KafkaSettings`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

import dagster as dg
from pydantic import Field, PrivateAttr

from pipeline_project.streaming.kafka.client import (
    KafkaRefusedError,
    KafkaSettings,
    KafkaStats,
    KafkaUnavailableError,
    TopicLayout,
    ensure_topic,
)
from pipeline_project.streaming.produce.request import ProduceRequest
from pipeline_project.streaming.topic import TopicSpec

if TYPE_CHECKING:
    from pipeline_project.streaming.ledger.records import LedgerRecords, ProduceReport

PREFLIGHT_TIMEOUT_S = 5.0


class KafkaResource(dg.ConfigurableResource):
    """confluent-kafka clients with the project's throughput defaults (see `streaming.kafka_client`).

    Unset fields take `KafkaSettings`' defaults. Secrets come from the environment:
    `sasl_password=dg.EnvVar("KAFKA_SASL_PASSWORD")`.
    """

    bootstrap_servers: str
    client_id: str | None = None
    transactional_id_prefix: str | None = None  # the same for every writer of a topic (streaming.client_policy)
    security_protocol: str | None = None  # validated by KafkaSettings
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = None
    ssl_ca_location: str | None = None
    producer_overrides: dict[str, Any] = Field(default_factory=dict)
    consumer_overrides: dict[str, Any] = Field(default_factory=dict)
    ledger_index_url: str | None = None
    """A PostgreSQL (libpq) URL for the ledger index (`streaming.ledger_index`): a ledger read then costs the
    batches written since the last one instead of the whole ledger. None: every read starts at offset 0."""
    ledger_index_schema: str = "kafka_ledger"

    _admin: Any = PrivateAttr(default=None)

    def settings(self) -> KafkaSettings:
        fields = ("bootstrap_servers", "client_id", "transactional_id_prefix", "security_protocol", "sasl_mechanism",
                  "sasl_username", "sasl_password", "ssl_ca_location")  # fmt: skip
        given = {name: getattr(self, name) for name in fields if getattr(self, name) is not None}
        return KafkaSettings(
            **given,
            producer_overrides=dict(self.producer_overrides),
            consumer_overrides=dict(self.consumer_overrides),
        )

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        self._admin = None
        settings = self.settings()  # refuses overrides that break exactly-once (UnsafeKafkaConfigError), one line
        if settings.security_protocol != "PLAINTEXT":
            # A wrong password or CA would otherwise surface as a bare timeout deep inside a step.
            try:
                settings.check_reachable(timeout_s=PREFLIGHT_TIMEOUT_S)
            except KafkaRefusedError:
                raise
            except KafkaUnavailableError:
                pass  # not answering (yet) is for the step's own timeouts and retries to judge

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        self._admin = None  # AdminClient has no close(); dropping it releases librdkafka's handle

    def admin(self):
        if self._admin is None:
            self._admin = self.settings().make_admin()
        return self._admin

    def producer(self, stats: KafkaStats | None = None):
        return self.settings().make_producer(stats)

    def consumer(self, **kwargs: Any):
        return self.settings().make_consumer(**kwargs)

    def produce_token_blocks(
        self,
        spec: TopicSpec,
        texts: Iterable[str | tuple[str | None, str]],
        *,
        source: str,
        ledger_key: str,
        content_hash: str,
        rehydration: str = "",
    ) -> ProduceReport:
        """Tokenize, pack and produce one batch into the topic `spec` names, in bounded transactions, with its
        ledger records, once per ledger key; blocks as the spec says (length, message size, fill-in-the-middle).

        `texts` may be `(domain, text)` pairs: packed per domain, each message with its `domain` header.
        `rehydration`: the fingerprint of the texts' weights (`cleaning.dedup.rehydration.fingerprint`; "" when off).
        """
        from pipeline_project.streaming.produce.request import ProducerConfig
        from pipeline_project.streaming.produce.tokenize import tokenize_and_produce
        from pipeline_project.streaming.tokenizer import load_tokenizer

        config = ProducerConfig(max_message_bytes=spec.message_bytes, fim=spec.fim, rehydration=rehydration)
        with self.ledger_index() as index:
            request = ProduceRequest(
                topic=spec.name,
                ledger_key=ledger_key,
                content_hash=content_hash,
                source=source,
                seq_len=spec.seq_len,
                tokenizer=load_tokenizer(),
                config=config,
                ledger_index=index,
            )
            return tokenize_and_produce(self.settings(), request, texts)

    def ledger_entry(self, topic: str, ledger_key: str) -> ProduceReport | None:
        from pipeline_project.streaming.ledger.records import read_ledger

        with self.ledger_index() as index:
            return read_ledger(self.settings(), topic, keys=[ledger_key], index=index).get(ledger_key)

    def ledger_records(self, topic: str, ledger_key: str) -> LedgerRecords:
        """Every ledger record of `ledger_key`: its completion, progress and retirement records."""
        from pipeline_project.streaming.ledger.records import read_ledger_records

        with self.ledger_index() as index:
            return read_ledger_records(self.settings(), topic, keys=[ledger_key], index=index)

    @contextlib.contextmanager
    def ledger_index(self) -> Iterator[Any]:
        """The ledger index (`streaming.ledger_index.PostgresLedgerIndex`), closed after use; None without
        `ledger_index_url`."""
        if not self.ledger_index_url:
            yield None
            return
        from pipeline_project.streaming.ledger.index import PostgresLedgerIndex

        index = PostgresLedgerIndex(self.ledger_index_url, schema=self.ledger_index_schema)
        try:
            yield index
        finally:
            index.close()

    def verify_blocks(self, report: ProduceReport) -> dict[str, Any]:
        """Read the report's offset ranges back (read_committed); raises if they do not hold its blocks."""
        from pipeline_project.streaming.produce.verify import verify_produced

        return verify_produced(self.settings(), report)

    def ensure_token_topic(self, spec: TopicSpec) -> TopicLayout:
        """Create the token topic as `spec` lays it out, or check that the existing one has that layout."""
        return ensure_topic(
            self.admin(),
            spec.name,
            partitions=spec.partitions,
            replication_factor=spec.replication_factor,
            min_insync_replicas=spec.min_insync_replicas,
            config=spec.topic_config(),
            message_bytes=spec.message_bytes,
        )
