"""The clients an operator command needs, made from `Settings`: Kafka (with its password from the environment), the
token topic and the ledger's PostgreSQL index."""

from __future__ import annotations

from pipeline_project.settings import KAFKA_SASL_PASSWORD_ENV, Settings, secret
from pipeline_project.streaming.kafka.client import KafkaSettings
from pipeline_project.streaming.ledger.index import PostgresLedgerIndex


def kafka_settings(settings: Settings) -> KafkaSettings:
    return KafkaSettings.from_settings(settings, sasl_password=secret(KAFKA_SASL_PASSWORD_ENV))


def ledger(settings: Settings, topic: str | None) -> tuple[KafkaSettings, str, PostgresLedgerIndex]:
    """Kafka settings, the topic (`topic`, else the settings') and the ledger's PostgreSQL index (close it)."""
    return kafka_settings(settings), topic or settings.topic, PostgresLedgerIndex(settings.postgres_url)
