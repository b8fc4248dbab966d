"""One module per external system. `build_resources` wires them from the environment."""

from __future__ import annotations

import os

import dagster as dg
from dagster_aws.s3 import S3Resource

from pipeline_project.resources.cleaning import CleaningResource
from pipeline_project.resources.kafka import KafkaResource
from pipeline_project.resources.layout import PipelineLayout
from pipeline_project.resources.mlflow import MlflowResource
from pipeline_project.resources.trainer import TrainerResource
from pipeline_project.settings import Settings


def _secret(name: str, default: str):
    """An EnvVar when the variable is set (so the value never lands in run config), else the local default."""
    return dg.EnvVar(name) if os.environ.get(name) else default


def build_resources(settings: Settings | None = None) -> dict:
    s = settings or Settings()
    return {
        "s3": S3Resource(
            endpoint_url=s.s3_endpoint,
            region_name=s.s3_region,
            aws_access_key_id=_secret("AWS_ACCESS_KEY_ID", s.s3_access_key),
            aws_secret_access_key=_secret("AWS_SECRET_ACCESS_KEY", s.s3_secret_key),
        ),
        "kafka": KafkaResource(
            bootstrap_servers=s.kafka_bootstrap,
            security_protocol=os.environ.get("KAFKA_SECURITY_PROTOCOL", "PLAINTEXT"),
            sasl_username=os.environ.get("KAFKA_SASL_USERNAME") or None,
            sasl_password=dg.EnvVar("KAFKA_SASL_PASSWORD") if os.environ.get("KAFKA_SASL_PASSWORD") else None,
            ssl_ca_location=os.environ.get("KAFKA_SSL_CA_LOCATION") or None,
        ),
        "mlflow": MlflowResource(tracking_uri=s.mlflow_tracking_uri),
        "layout": PipelineLayout(bucket=s.bucket, raw_prefix=s.raw_prefix, topic=s.topic),
        "cleaning": CleaningResource(config_path=os.environ.get("PIPELINE_CLEANING_CONFIG") or None),
        "trainer": TrainerResource(),
    }
