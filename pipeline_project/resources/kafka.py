"""Kafka as a Dagster resource: configuration and client factories over `streaming.kafka_client`."""

from __future__ import annotations

from typing import Any, Literal

import dagster as dg
from pydantic import Field, PrivateAttr

from pipeline_project.streaming.kafka_client import KafkaSettings, KafkaStats, TopicLayout, ensure_topic


class KafkaResource(dg.ConfigurableResource):
    """confluent-kafka clients with the project's throughput defaults (see CONVENTIONS.md).

    Secrets come from the environment: `sasl_password=dg.EnvVar("KAFKA_SASL_PASSWORD")`.
    """

    bootstrap_servers: str
    client_id: str = "pipeline-project"
    security_protocol: Literal["PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: Literal["SCRAM-SHA-256", "SCRAM-SHA-512"] = "SCRAM-SHA-512"
    sasl_username: str | None = None
    sasl_password: str | None = None
    ssl_ca_location: str | None = None
    producer_overrides: dict[str, Any] = Field(default_factory=dict)
    consumer_overrides: dict[str, Any] = Field(default_factory=dict)
    statistics_interval_ms: int = 1000

    _admin: Any = PrivateAttr(default=None)

    def settings(self) -> KafkaSettings:
        return KafkaSettings(
            bootstrap_servers=self.bootstrap_servers,
            client_id=self.client_id,
            security_protocol=self.security_protocol,
            sasl_mechanism=self.sasl_mechanism,
            sasl_username=self.sasl_username,
            sasl_password=self.sasl_password,
            ssl_ca_location=self.ssl_ca_location,
            producer_overrides=dict(self.producer_overrides),
            consumer_overrides=dict(self.consumer_overrides),
            statistics_interval_ms=self.statistics_interval_ms,
        )

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        self._admin = None

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        self._admin = None  # AdminClient has no close(); dropping it releases librdkafka's handle

    def admin(self):
        if self._admin is None:
            self._admin = self.settings().make_admin()
        return self._admin

    def producer(self, stats: KafkaStats | None = None):
        return self.settings().make_producer(stats)

    def transactional_producer(self, transactional_id: str, stats: KafkaStats | None = None):
        return self.settings().make_transactional_producer(transactional_id, stats=stats)

    def consumer(self, **kwargs: Any):
        return self.settings().make_consumer(**kwargs)

    def ensure_topic(
        self,
        name: str,
        partitions: int = 8,
        replication_factor: int = 3,
        min_insync_replicas: int = 2,
        config: dict[str, Any] | None = None,
    ) -> TopicLayout:
        return ensure_topic(
            self.admin(),
            name,
            partitions=partitions,
            replication_factor=replication_factor,
            min_insync_replicas=min_insync_replicas,
            config=config,
        )
