"""Every setting of the pipeline, read from the environment in this one module.

Kafka, MLflow, PostgreSQL and Dagster default to the embedded local stack (`pipeline-project stack up`).
PIPELINE_S3_ENDPOINT unset means AWS S3 with boto3's default credential chain (env keys, IRSA, instance profile,
~/.aws); the command line and the local stack's processes hand in the stack's S3 while it runs
(`stack.discovery`). The local keys only ever go to an endpoint on this machine.
Point the pipeline at your own services by exporting the variables below; the README's settings table lists them all.
Nothing else in the package reads `os.environ` for configuration: components receive a `Settings`
(or the resource config built from it).
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

LOCAL_KAFKA_PORTS = (19092, 19093, 19094)
LOCAL_S3_PORT = 19000
LOCAL_MLFLOW_PORT = 15000
LOCAL_DAGSTER_PORT = 13000
LOCAL_POSTGRES_PORT = 15432
LOCAL_PROMETHEUS_PORT = 19090  # Prometheus and its Pushgateway (`stack up --services prometheus`)
LOCAL_PUSHGATEWAY_PORT = 19091

LOCAL_S3_ACCESS_KEY = "pipeline"
LOCAL_S3_SECRET_KEY = "pipeline-secret"
LOCAL_POSTGRES_USER = "pipeline"
LOCAL_POSTGRES_PASSWORD = "pipeline-pg"
LOCAL_POSTGRES_DATABASES = ("pipeline", "dagster")  # the dedup index; Dagster's run, event and schedule storage

DEFAULT_BUCKET = "pipeline"
DEFAULT_RAW_PREFIX = "raw/"
DEFAULT_TOPIC = "token-blocks"
DEFAULT_TRAINING_EXPERIMENT = "deepseek-pretraining"
DEFAULT_INGEST_EXPERIMENT = "kafka-ingest"
DEFAULT_MLFLOW_ARTIFACTS_BUCKET = "mlflow-artifacts"
DEFAULT_MIN_NEW_TOKENS = 200_000
# The checkpoint lineage a triggered run continues: checkpoints under <checkpoints prefix><lineage>/, and the MLflow
# registered model of the same name
DEFAULT_LINEAGE = "deepseek"
# A triggered training run trains at most this many steps (0: no bound); the next triggered run trains the rest.
# 200 steps of the tiny preset take minutes on a CPU; a GPU deployment raises it.
DEFAULT_TRIGGER_MAX_STEPS = 200
DEFAULT_TRIGGER_RETRY_BASE_S = 60.0  # after a failed training run the trigger waits 60 s, 120 s, 240 s, ...
DEFAULT_TRIGGER_RETRY_MAX_S = 3600.0  # ... at most an hour
# Run monitoring fails a run of each kind still going after this long (the run's `dagster/max_runtime` tag), so a
# hung run frees its slot and run retries launch it again; 0: the instance's max_runtime_seconds alone.
DEFAULT_INGEST_MAX_RUNTIME_S = 7200  # a batch's three steps, their retries included, take minutes
DEFAULT_TRAINING_MAX_RUNTIME_S = 90000  # 25 h: a triggered run's PIPELINE_TRIGGER_MAX_STEPS fit in a day
# Fill-in-the-middle for the code domain (`PipelineLayout.fim_code_rate`): off in the library and the deployments;
# the local stack's Dagster runs at DeepSeek-V3's rate (`stack_corpus_env`)
DEFAULT_FIM_CODE_RATE = 0.0
STACK_FIM_CODE_RATE = 0.1

# Secrets are never stored in `Settings`: the Dagster layer passes them on as `dg.EnvVar(NAME)`,
# and the trainer process reads them through `secret()`.
AWS_ACCESS_KEY_ENV = "AWS_ACCESS_KEY_ID"
AWS_SECRET_KEY_ENV = "AWS_SECRET_ACCESS_KEY"
KAFKA_SASL_PASSWORD_ENV = "KAFKA_SASL_PASSWORD"


def is_local_endpoint(url: str | None) -> bool:
    """True for an endpoint on this machine (127.0.0.1, localhost, ::1): the only place the local stack runs."""
    if not url:
        return False
    return (urlsplit(url).hostname or "") in {"127.0.0.1", "localhost", "::1"}


def _env(name: str, default: str) -> str:
    value = os.environ.get(name)
    return value if value else default


def _comma_list(value: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in value.split(",") if item.strip())


def _off_is_empty(value: str) -> str:
    return "" if value.strip().lower() == "off" else value


def _env_or_none(name: str) -> str | None:
    return os.environ.get(name) or None


def _number_or_none(name: str, kind: type[int] | type[float]) -> int | float | None:
    """The variable `name` as a number; None when unset. Raises ValueError, naming the variable, otherwise."""
    raw = _env_or_none(name)
    if raw is None:
        return None
    try:
        return kind(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not {'an integer' if kind is int else 'a number'}") from None


def stack_ports(name: str, default: tuple[int, ...]) -> tuple[int, ...]:
    """The embedded stack's ports from the comma-separated variable `name` (PIPELINE_KAFKA_PORTS, PIPELINE_S3_PORT).

    Raises ValueError, naming the variable, when its value is not a list of integers.
    """
    raw = _env_or_none(name)
    if raw is None:
        return default
    try:
        return tuple(int(p) for p in raw.split(","))
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not a comma-separated list of ports") from None


def stack_state_dir() -> str | None:
    """PIPELINE_STATE_DIR: where the embedded stack keeps its state; None when unset (the stack's default then)."""
    return _env_or_none("PIPELINE_STATE_DIR")


def stack_kafka_security() -> str | None:
    """PIPELINE_KAFKA_SECURITY: the embedded stack's Kafka profile, "plaintext" or "sasl_ssl" (`stack up --secure`);
    None when unset (the profile the state dir's Kafka storage was formatted with, plaintext for a new one)."""
    value = _env_or_none("PIPELINE_KAFKA_SECURITY")
    return value.lower() if value else None


def stack_corpus_env(cleaning_config: Path) -> dict[str, str]:
    """The corpus settings the local stack's Dagster runs with: DeepSeek-style, FIM for code at
    STACK_FIM_CODE_RATE and the cleaning config `cleaning_config` (benchmark decontamination), unless the
    environment `stack up` runs in sets PIPELINE_FIM_CODE_RATE or PIPELINE_CLEANING_CONFIG itself."""
    return {
        "PIPELINE_FIM_CODE_RATE": _env("PIPELINE_FIM_CODE_RATE", str(STACK_FIM_CODE_RATE)),
        "PIPELINE_CLEANING_CONFIG": _env("PIPELINE_CLEANING_CONFIG", str(cleaning_config)),
    }


def _local_kafka_bootstrap() -> str:
    # The stack's own port overrides (PIPELINE_KAFKA_PORTS, PIPELINE_MLFLOW_PORT, ...) also move the client defaults;
    # S3 has no local default (see the module docstring).
    ports = _env("PIPELINE_KAFKA_PORTS", ",".join(str(p) for p in LOCAL_KAFKA_PORTS)).split(",")
    return ",".join(f"127.0.0.1:{p.strip()}" for p in ports)


def _local_url(port_env: str, default_port: int) -> str:
    return f"http://127.0.0.1:{_env(port_env, str(default_port))}"


def secret_is_set(name: str) -> bool:
    """True when the secret's environment variable is set (the value itself stays in the environment)."""
    return bool(os.environ.get(name))


def secret(name: str) -> str | None:
    """A secret's value, for the one place that must hand it to a client (the trainer's Kafka login)."""
    return os.environ.get(name) or None


@dataclass(frozen=True)
class DistEnv:
    """The process's place in a `torchrun` job (RANK, WORLD_SIZE, LOCAL_RANK); one process without it.

    With WORLD_SIZE > 1, RANK must be set (torchrun always sets both).
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @classmethod
    def from_env(cls) -> DistEnv:
        world_size = int(_env("WORLD_SIZE", "1"))
        if world_size <= 1:
            return cls()
        return cls(rank=int(os.environ["RANK"]), world_size=world_size, local_rank=int(_env("LOCAL_RANK", "0")))


@dataclass(frozen=True)
class Settings:
    kafka_bootstrap: str = field(default_factory=lambda: _env("PIPELINE_KAFKA_BOOTSTRAP", _local_kafka_bootstrap()))
    # None: the client library's default (`streaming.kafka_client.KafkaSettings`: PLAINTEXT, SCRAM-SHA-512)
    kafka_security_protocol: str | None = field(default_factory=lambda: _env_or_none("KAFKA_SECURITY_PROTOCOL"))
    kafka_sasl_mechanism: str | None = field(default_factory=lambda: _env_or_none("KAFKA_SASL_MECHANISM"))
    kafka_sasl_username: str | None = field(default_factory=lambda: _env_or_none("KAFKA_SASL_USERNAME"))
    kafka_ssl_ca_location: str | None = field(default_factory=lambda: _env_or_none("KAFKA_SSL_CA_LOCATION"))
    # Unset: AWS S3 itself (`stack.discovery.with_local_s3` hands in the local stack's S3 while it runs). The
    # keys: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY when set; else, for an endpoint on this machine, the local
    # stack's keys; else None, so boto3 uses its default credential chain (IRSA, ...).
    s3_endpoint: str | None = field(default_factory=lambda: _env_or_none("PIPELINE_S3_ENDPOINT"))
    s3_access_key: str | None = field(default_factory=lambda: _env_or_none(AWS_ACCESS_KEY_ENV), repr=False)
    s3_secret_key: str | None = field(default_factory=lambda: _env_or_none(AWS_SECRET_KEY_ENV), repr=False)
    s3_region: str = field(default_factory=lambda: _env("AWS_REGION", "us-east-1"))
    bucket: str = field(default_factory=lambda: _env("PIPELINE_S3_BUCKET", DEFAULT_BUCKET))
    raw_prefix: str = field(default_factory=lambda: _env("PIPELINE_RAW_PREFIX", DEFAULT_RAW_PREFIX))
    mlflow_tracking_uri: str = field(
        default_factory=lambda: _env("MLFLOW_TRACKING_URI", _local_url("PIPELINE_MLFLOW_PORT", LOCAL_MLFLOW_PORT))
    )
    mlflow_artifacts_bucket: str = field(
        default_factory=lambda: _env("PIPELINE_MLFLOW_ARTIFACTS_BUCKET", DEFAULT_MLFLOW_ARTIFACTS_BUCKET)
    )
    mlflow_experiment: str = field(
        default_factory=lambda: _env("PIPELINE_MLFLOW_EXPERIMENT", DEFAULT_TRAINING_EXPERIMENT)
    )
    topic: str = field(default_factory=lambda: _env("PIPELINE_TOPIC", DEFAULT_TOPIC))
    dagster_url: str = field(
        default_factory=lambda: _env("PIPELINE_DAGSTER_URL", _local_url("PIPELINE_DAGSTER_PORT", LOCAL_DAGSTER_PORT))
    )
    # The dedup index's database. A deployment passes the URL without a password and the password as PGPASSWORD
    # (libpq reads it from the environment), so no secret sits in configuration.
    postgres_url: str = field(
        default_factory=lambda: _env(
            "PIPELINE_POSTGRES_URL",
            f"postgresql://{LOCAL_POSTGRES_USER}:{LOCAL_POSTGRES_PASSWORD}@127.0.0.1:"
            f"{_env('PIPELINE_POSTGRES_PORT', str(LOCAL_POSTGRES_PORT))}/pipeline",
        ),
        repr=False,
    )
    # The dedup index split across PostgreSQL servers (`cleaning/dedup/sharded.py`): their URLs, comma separated, in
    # a fixed order (a document's shard is a hash of its exact key mod their number). Unset: the one index in
    # PIPELINE_POSTGRES_URL; one URL: the one index there. Without passwords, as PIPELINE_POSTGRES_URL.
    dedup_shard_urls: tuple[str, ...] = field(
        default_factory=lambda: _comma_list(_env("PIPELINE_DEDUP_SHARD_URLS", "")), repr=False
    )
    # JSON of resources.launchers.TrainerLaunch ({"launcher": "k8s", "image": ...}); unset: a local subprocess
    trainer_launch: str | None = field(default_factory=lambda: _env_or_none("PIPELINE_TRAINER_LAUNCH"))
    cleaning_config_path: str | None = field(default_factory=lambda: _env_or_none("PIPELINE_CLEANING_CONFIG"))
    # What a triggered training run trains (`resources.trainer.trainer_from_settings`, validated when the definitions
    # load). The model: a preset name, or a TrainConfig as JSON or as the path of a JSON file; unset: TrainConfig's.
    train_model: str | None = field(default_factory=lambda: _env_or_none("PIPELINE_TRAIN_MODEL"))
    lineage: str = field(default_factory=lambda: _env("PIPELINE_LINEAGE", DEFAULT_LINEAGE))
    # Hyper-parameters over the model's TrainConfig; unset: the TrainConfig's own
    train_lr: float | None = field(default_factory=lambda: _number_or_none("PIPELINE_TRAIN_LR", float))
    train_min_lr: float | None = field(default_factory=lambda: _number_or_none("PIPELINE_TRAIN_MIN_LR", float))
    train_warmup_steps: int | None = field(default_factory=lambda: _number_or_none("PIPELINE_TRAIN_WARMUP_STEPS", int))
    train_decay_steps: int | None = field(default_factory=lambda: _number_or_none("PIPELINE_TRAIN_DECAY_STEPS", int))
    train_batch_size: int | None = field(default_factory=lambda: _number_or_none("PIPELINE_TRAIN_BATCH_SIZE", int))
    train_checkpoint_every: int | None = field(
        default_factory=lambda: _number_or_none("PIPELINE_TRAIN_CHECKPOINT_EVERY", int)
    )
    train_parallelism: str | None = field(default_factory=lambda: _env_or_none("PIPELINE_TRAIN_PARALLELISM"))
    # JSON of resources.layout.IntakeConfig (batch size, batches per tick, listing bounds); unset: its defaults
    intake: str | None = field(default_factory=lambda: _env_or_none("PIPELINE_INTAKE"))
    # the fraction of code documents `token_blocks` lays out for fill-in-the-middle (0: off)
    fim_code_rate: float = field(
        default_factory=lambda: float(_env("PIPELINE_FIM_CODE_RATE", str(DEFAULT_FIM_CODE_RATE)))
    )
    min_new_tokens: int = field(
        default_factory=lambda: int(_env("PIPELINE_MIN_NEW_TOKENS", str(DEFAULT_MIN_NEW_TOKENS)))
    )
    trigger_max_steps: int = field(
        default_factory=lambda: int(_env("PIPELINE_TRIGGER_MAX_STEPS", str(DEFAULT_TRIGGER_MAX_STEPS)))
    )
    trigger_retry_base_s: float = field(
        default_factory=lambda: float(_env("PIPELINE_TRIGGER_RETRY_BASE_S", str(DEFAULT_TRIGGER_RETRY_BASE_S)))
    )
    trigger_retry_max_s: float = field(
        default_factory=lambda: float(_env("PIPELINE_TRIGGER_RETRY_MAX_S", str(DEFAULT_TRIGGER_RETRY_MAX_S)))
    )
    ingest_max_runtime_s: int = field(
        default_factory=lambda: int(_env("PIPELINE_INGEST_MAX_RUNTIME_S", str(DEFAULT_INGEST_MAX_RUNTIME_S)))
    )
    training_max_runtime_s: int = field(
        default_factory=lambda: int(_env("PIPELINE_TRAINING_MAX_RUNTIME_S", str(DEFAULT_TRAINING_MAX_RUNTIME_S)))
    )
    # Prometheus (pipeline_project/common/metrics/prometheus.py): the trainer's /metrics base port (rank r serves base + local rank;
    # unset or 0: off), and the Pushgateway short-lived Dagster steps push to (unset: the local stack's; "off": none)
    metrics_port: int = field(default_factory=lambda: int(_env("PIPELINE_METRICS_PORT", "0")))
    pushgateway_url: str = field(
        default_factory=lambda: _off_is_empty(
            _env("PIPELINE_PUSHGATEWAY_URL", _local_url("PIPELINE_PUSHGATEWAY_PORT", LOCAL_PUSHGATEWAY_PORT))
        )
    )

    def __post_init__(self) -> None:
        if self.s3_access_key is None and self.s3_secret_key is None and is_local_endpoint(self.s3_endpoint):
            object.__setattr__(self, "s3_access_key", LOCAL_S3_ACCESS_KEY)
            object.__setattr__(self, "s3_secret_key", LOCAL_S3_SECRET_KEY)

    @property
    def buckets(self) -> list[str]:
        return [self.bucket, self.mlflow_artifacts_bucket]

    def s3_client(self) -> Any:
        """The project's one boto3 S3 client factory (path-style addressing, for S3-protocol servers)."""
        return make_s3_client(self.s3_endpoint, self.s3_access_key, self.s3_secret_key, self.s3_region)


def _credential_env() -> tuple[tuple[str, str], ...]:
    # boto3 reads every AWS_* variable (keys, profile, web identity, config files)
    return tuple(sorted((k, v) for k, v in os.environ.items() if k.lower().startswith("aws_")))


@functools.lru_cache(maxsize=8)
def _boto3_session(credential_env: tuple[tuple[str, str], ...]) -> Any:
    """A boto3 session per set of AWS_* variables: boto3's process-wide default session would keep the credential
    chain it first resolved, whatever the environment says later."""
    import boto3

    return boto3.session.Session()


def make_s3_client(
    endpoint: str | None,
    access_key: str | None,
    secret_key: str | None,
    region: str = "us-east-1",
    *,
    max_attempts: int = 5,
    connect_timeout: float = 60,
    read_timeout: float = 60,
):
    """A boto3 S3 client; with an `endpoint` (an S3-protocol server) it addresses buckets by path."""
    from botocore.config import Config

    return _boto3_session(_credential_env()).client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=access_key,
        aws_secret_access_key=secret_key,
        region_name=region,
        config=Config(
            s3={"addressing_style": "path"} if endpoint else {},
            retries={"max_attempts": max_attempts, "mode": "standard"},
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
        ),
    )
