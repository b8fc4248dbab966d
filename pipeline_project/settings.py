"""Where the pipeline's services are. Plain Python, read from the environment.

The defaults point at the embedded local stack (`pipeline-project stack up`). Point the
pipeline at your own services by exporting the variables below.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

LOCAL_KAFKA_PORTS = (19092, 19093, 19094)
LOCAL_S3_PORT = 19000
LOCAL_MLFLOW_PORT = 15000
LOCAL_DAGSTER_PORT = 13000

LOCAL_S3_ACCESS_KEY = "pipeline"
LOCAL_S3_SECRET_KEY = "pipeline-secret"


def _env(name: str, default: str) -> str:
    value = os.environ.get(name)
    return value if value else default


def _local_port(name: str, default: int) -> str:
    # The stack's own port overrides (PIPELINE_S3_PORT, ...) also move the client defaults.
    return _env(name, str(default))


def _local_kafka_bootstrap() -> str:
    ports = _env("PIPELINE_KAFKA_PORTS", ",".join(str(p) for p in LOCAL_KAFKA_PORTS)).split(",")
    return ",".join(f"127.0.0.1:{p.strip()}" for p in ports)


@dataclass(frozen=True)
class Settings:
    kafka_bootstrap: str = field(default_factory=lambda: _env("PIPELINE_KAFKA_BOOTSTRAP", _local_kafka_bootstrap()))
    s3_endpoint: str = field(
        default_factory=lambda: _env(
            "PIPELINE_S3_ENDPOINT", f"http://127.0.0.1:{_local_port('PIPELINE_S3_PORT', LOCAL_S3_PORT)}"
        )
    )
    s3_access_key: str = field(default_factory=lambda: _env("AWS_ACCESS_KEY_ID", LOCAL_S3_ACCESS_KEY))
    s3_secret_key: str = field(default_factory=lambda: _env("AWS_SECRET_ACCESS_KEY", LOCAL_S3_SECRET_KEY))
    s3_region: str = field(default_factory=lambda: _env("AWS_REGION", "us-east-1"))
    bucket: str = field(default_factory=lambda: _env("PIPELINE_S3_BUCKET", "pipeline"))
    raw_prefix: str = field(default_factory=lambda: _env("PIPELINE_RAW_PREFIX", "raw/"))
    mlflow_tracking_uri: str = field(
        default_factory=lambda: _env(
            "MLFLOW_TRACKING_URI", f"http://127.0.0.1:{_local_port('PIPELINE_MLFLOW_PORT', LOCAL_MLFLOW_PORT)}"
        )
    )
    mlflow_artifacts_bucket: str = field(
        default_factory=lambda: _env("PIPELINE_MLFLOW_ARTIFACTS_BUCKET", "mlflow-artifacts")
    )
    topic: str = field(default_factory=lambda: _env("PIPELINE_TOPIC", "token-blocks"))
    dagster_url: str = field(
        default_factory=lambda: _env(
            "PIPELINE_DAGSTER_URL", f"http://127.0.0.1:{_local_port('PIPELINE_DAGSTER_PORT', LOCAL_DAGSTER_PORT)}"
        )
    )

    @property
    def buckets(self) -> list[str]:
        return [self.bucket, self.mlflow_artifacts_bucket]


def get_settings() -> Settings:
    return Settings()
