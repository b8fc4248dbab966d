"""One module per external system. `build_resources` wires them from `Settings` (the environment)."""

from __future__ import annotations

import dagster as dg
from dagster_aws.s3 import S3Resource

from pipeline_project.defs.resources.cleaning import CleaningResource
from pipeline_project.defs.resources.dedup import DedupIndexResource
from pipeline_project.defs.resources.kafka import KafkaResource
from pipeline_project.defs.resources.layout import IntakeConfig, PipelineLayout, TopicConfig
from pipeline_project.defs.resources.locks import BatchLocks
from pipeline_project.defs.resources.mlflow import MlflowResource
from pipeline_project.defs.resources.pushgateway import PushgatewayResource
from pipeline_project.defs.resources.trainer import trainer_from_settings
from pipeline_project.defs.resources.trigger import TrainingTrigger
from pipeline_project.settings import (
    AWS_ACCESS_KEY_ENV,
    AWS_SECRET_KEY_ENV,
    KAFKA_SASL_PASSWORD_ENV,
    Settings,
    secret_is_set,
)


def _secret(name: str, local_default: str | None):
    """An EnvVar when the variable is set (so the value never lands in run config), else the local default."""
    return dg.EnvVar(name) if secret_is_set(name) else local_default


def build_resources(settings: Settings | None = None) -> dict:
    s = settings or Settings()
    s3 = S3Resource(
        endpoint_url=s.s3_endpoint,
        region_name=s.s3_region,
        aws_access_key_id=_secret(AWS_ACCESS_KEY_ENV, s.s3_access_key),
        aws_secret_access_key=_secret(AWS_SECRET_KEY_ENV, s.s3_secret_key),
    )
    layout = PipelineLayout(
        bucket=s.bucket,
        raw_prefix=s.raw_prefix,
        topic=TopicConfig(name=s.topic, fim_code_rate=s.fim_code_rate),
        intake=IntakeConfig.from_json(s.intake),
    )
    return {
        "s3": s3,
        "kafka": KafkaResource(
            bootstrap_servers=s.kafka_bootstrap,
            security_protocol=s.kafka_security_protocol,
            sasl_mechanism=s.kafka_sasl_mechanism,
            sasl_username=s.kafka_sasl_username,
            sasl_password=_secret(KAFKA_SASL_PASSWORD_ENV, None),
            ssl_ca_location=s.kafka_ssl_ca_location,
            ledger_index_url=s.postgres_url,
        ),
        "mlflow": MlflowResource(tracking_uri=s.mlflow_tracking_uri),
        "layout": layout,
        "cleaning": CleaningResource(config_path=s.cleaning_config_path),
        "dedup": DedupIndexResource(postgres_url=s.postgres_url, shard_urls=list(s.dedup_shard_urls)),
        "locks": BatchLocks(postgres_url=s.postgres_url),
        "trainer": trainer_from_settings(s),
        "trigger": training_trigger(s, backlog_url=s.postgres_url, s3=s3, layout=layout),
        "pushgateway": PushgatewayResource(url=s.pushgateway_url, totals_url=s.postgres_url),
    }


def training_trigger(
    s: Settings, backlog_url: str = "", s3: S3Resource | None = None, layout: PipelineLayout | None = None
) -> TrainingTrigger:
    """The trigger's resource from `s`; the deployment's keeps its backlog in `backlog_url` (the stand-in: "") and
    counts from its lineage's latest.json in `s3` (None: from the newest checkpoint materialization)."""
    return TrainingTrigger(
        backlog_url=backlog_url,
        s3=s3,
        layout=layout,
        min_new_tokens=s.min_new_tokens,
        max_steps=s.trigger_max_steps,
        retry_base_s=s.trigger_retry_base_s,
        retry_max_s=s.trigger_retry_max_s,
        max_runtime_s=s.training_max_runtime_s,
    )
