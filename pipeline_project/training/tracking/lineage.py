"""What a training run trained on, and what it produced, in MLflow's own terms.

- Inputs (`log_training_inputs`): two MLflow datasets logged with the run's inputs (context `training`):
  `kafka:<topic>`, one row per Kafka partition with the `[first, end)` offsets the run read and the position it
  stopped at (source type `kafka`: bootstrap servers and topic, never a credential); and `cleaned_shards`, one
  row per data partition (batch) with the S3 URI of its shard manifest (source: the shards' S3 prefix).
- Outputs (`register_checkpoint`): every checkpoint that `latest.json` moved to becomes a version of a
  registered model whose source is the checkpoint's HF directory in S3 (no copy of the weights; its `MLmodel`,
  written by `mlflow_model`, lets `mlflow.transformers.load_model("models:/<name>@latest-checkpoint")` read
  it). The version's tags are the lineage: `dagster_run_id`, `partitions`, `offsets` (JSON, Kafka partition -> [first, end) read up
  to this checkpoint), `config_hash`, `step`, `checkpoint_uri`. The alias `CHECKPOINT_ALIAS` moves to it.
  MLflow reserves the alias `latest` (`'latest' alias name (case insensitive) is reserved`, and
  `models:/<name>/latest` already means the highest version), hence `latest-checkpoint`, after `latest.json`.

Imports mlflow and pandas, never torch or dagster.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Mapping
from typing import Any

from mlflow.data.dataset_source import DatasetSource
from mlflow.entities import DatasetInput, InputTag
from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import RESOURCE_ALREADY_EXISTS, RESOURCE_DOES_NOT_EXIST, ErrorCode
from mlflow.tracking import MlflowClient

CHECKPOINT_ALIAS = "latest-checkpoint"
DATASET_CONTEXT = "training"
_MAX_VERSION_TAG = 5000


class KafkaTopicSource(DatasetSource):
    """A Kafka topic as an MLflow dataset source (which offsets: the dataset's rows)."""

    def __init__(self, bootstrap_servers: str, topic: str):
        self.bootstrap_servers = bootstrap_servers
        self.topic = topic

    @staticmethod
    def _get_source_type() -> str:
        return "kafka"

    def load(self, timeout_s: float = 10.0, **client_config: Any) -> dict[int, tuple[int, int]]:
        """The topic's partitions and their (low, high) watermarks now: where the dataset's offsets can be read.
        `client_config`: extra librdkafka settings (security); read the blocks with `streaming.loader`."""
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap_servers,
                "group.id": "mlflow-dataset-source",
                "enable.auto.commit": False,
                **client_config,
            }
        )
        try:
            partitions = consumer.list_topics(self.topic, timeout=timeout_s).topics[self.topic].partitions
            return {
                p: consumer.get_watermark_offsets(TopicPartition(self.topic, p), timeout=timeout_s)
                for p in sorted(partitions)
            }
        finally:
            consumer.close()

    def uri(self) -> str:
        return f"kafka://{self.bootstrap_servers}/{self.topic}"

    @staticmethod
    def _can_resolve(raw_source: Any) -> bool:
        return isinstance(raw_source, str) and raw_source.startswith("kafka://") and "/" in raw_source[8:]

    @classmethod
    def _resolve(cls, raw_source: Any) -> KafkaTopicSource:
        bootstrap, topic = str(raw_source)[len("kafka://") :].rsplit("/", 1)
        return cls(bootstrap, topic)

    def to_dict(self) -> dict[str, Any]:
        return {"bootstrap_servers": self.bootstrap_servers, "topic": self.topic}

    @classmethod
    def from_dict(cls, source_dict: dict[Any, Any]) -> KafkaTopicSource:
        return cls(source_dict["bootstrap_servers"], source_dict["topic"])


def kafka_offsets_dataset(
    bootstrap_servers: str,
    topic: str,
    offsets_consumed: Mapping[str, list[int]],
    end_position: Mapping[str, Mapping[str, int]],
):
    """The `kafka:<topic>` dataset: one row per partition read (partition, first_offset, end_offset, end_block)."""
    import mlflow.data
    import pandas as pd

    rows = [
        {
            "partition": int(p),
            "first_offset": first,
            "end_offset": end,
            "end_block": end_position.get(p, {}).get("block", 0),
        }
        for p, (first, end) in offsets_consumed.items()
    ]
    frame = pd.DataFrame(rows, columns=["partition", "first_offset", "end_offset", "end_block"])
    with warnings.catch_warnings():  # "integer columns cannot represent missing values": none are missing
        warnings.simplefilter("ignore", UserWarning)
        return mlflow.data.from_pandas(frame, source=KafkaTopicSource(bootstrap_servers, topic), name=f"kafka:{topic}")


def shard_manifests_dataset(manifests: Mapping[str, str]):
    """The `cleaned_shards` dataset: one row per batch (batch, manifest_uri); source: the manifests' common prefix."""
    import mlflow.data
    import pandas as pd

    frame = pd.DataFrame(
        [{"batch": b, "manifest_uri": uri} for b, uri in sorted(manifests.items())], columns=["batch", "manifest_uri"]
    )
    return mlflow.data.from_pandas(frame, source=_common_dir(list(manifests.values())), name="cleaned_shards")


def _common_dir(uris: list[str]) -> str:
    """The longest common directory of URIs, compared by path components ("s3://b/x/1/m", "s3://b/x/2/m" -> "s3://b/x/")."""
    parts = [uri.split("/")[:-1] for uri in uris]
    common = []
    for column in zip(*parts):
        if len(set(column)) > 1:
            break
        common.append(column[0])
    return "/".join(common) + "/"


def log_training_inputs(client: MlflowClient, run_id: str, datasets: list[Any]) -> None:
    """Log `datasets` as the run's inputs, context `training` (the run page's "Datasets used")."""
    tag = InputTag(key="mlflow.data.context", value=DATASET_CONTEXT)
    client.log_inputs(run_id, datasets=[DatasetInput(d._to_mlflow_entity(), tags=[tag]) for d in datasets])


def lineage_tags(
    *,
    dagster_run_id: str | None,
    partitions: list[str],
    offsets: Mapping[str, list[int]],
    config_hash: str,
    **extra: Any,
) -> dict[str, str]:
    """A model version's lineage tags, as strings within MLflow's tag length."""
    tags = {
        "dagster_run_id": dagster_run_id or "",
        "partitions": ",".join(partitions),
        "offsets": json.dumps(dict(offsets), separators=(",", ":")),
        "config_hash": config_hash,
        **{k: str(v) for k, v in extra.items()},
    }
    return {k: v[:_MAX_VERSION_TAG] for k, v in tags.items()}


def register_checkpoint(
    client: MlflowClient,
    name: str,
    *,
    source: str,
    run_id: str | None,
    tags: Mapping[str, str],
    description: str = "",
    alias: str = CHECKPOINT_ALIAS,
) -> str:
    """A new version of registered model `name` (created if missing) for the checkpoint at `source`; moves `alias`
    to it and returns the version number."""
    try:
        client.create_registered_model(
            name, description="DeepSeek-V3-architecture checkpoints of one lineage (pipeline_project)"
        )
    except MlflowException as exc:
        if exc.error_code != ErrorCode.Name(RESOURCE_ALREADY_EXISTS):
            raise
    version = client.create_model_version(
        name, source=source, run_id=run_id, tags=dict(tags), description=description
    ).version
    client.set_registered_model_alias(name, alias, version)
    return str(version)


def point_alias_at(client: MlflowClient, name: str, source: str, alias: str = CHECKPOINT_ALIAS) -> str | None:
    """Move `alias` of registered model `name` to the version registered for the checkpoint folder `source` (its
    `hf/` URI), the newest such version; None when none was registered (the alias stays where it was)."""
    try:
        versions = client.search_model_versions(f"name='{name}'")
    except MlflowException as exc:
        if exc.error_code == ErrorCode.Name(RESOURCE_DOES_NOT_EXIST):
            return None
        raise
    found = sorted((int(v.version) for v in versions if v.source == source), reverse=True)
    if not found:
        return None
    client.set_registered_model_alias(name, alias, str(found[0]))
    return str(found[0])


def versions_of_checkpoints(client: MlflowClient, checkpoint_uris: list[str]) -> dict[str, list[Any]]:
    """The model versions registered for each checkpoint folder (their `checkpoint_uri` tag), by URI."""
    found: dict[str, list[Any]] = {}
    for uri in sorted(set(checkpoint_uris)):
        escaped = uri.replace("'", "\\'")
        found[uri] = list(client.search_model_versions(f"tags.checkpoint_uri = '{escaped}'"))
    return found


def model_version_url(tracking_uri: str, name: str, version: str) -> str:
    """The MLflow UI address of a registered model version."""
    return f"{tracking_uri.rstrip('/')}/#/models/{name}/versions/{version}"


def artifact_url(tracking_uri: str, run_id: str, path: str) -> str:
    """A direct (browser-fetchable) address of one run artifact, served by the tracking server."""
    return f"{tracking_uri.rstrip('/')}/get-artifact?path={path}&run_uuid={run_id}"
