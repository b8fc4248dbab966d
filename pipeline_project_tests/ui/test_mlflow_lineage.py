"""MLflow after the two demo trainings (real server of the local stack): the runs compare cleanly, each checkpoint is
a registered model version whose tags are its lineage, the alias follows the newest, inputs name the Kafka offsets
and shard manifests, and the loss curve is an artifact the materialization shows."""

from __future__ import annotations

import json
import urllib.request

import pytest
from mlflow.tracking import MlflowClient

from pipeline_project.training.tracking.lineage import CHECKPOINT_ALIAS

pytestmark = pytest.mark.stack


@pytest.fixture(scope="module")
def client(demo_runs) -> MlflowClient:
    return MlflowClient(demo_runs.mlflow_url)


def _run(client, training):
    return client.get_run(training.metadata["mlflow_run_id"])


def test_two_runs_compare_with_the_same_metric_names_params_and_tags(demo_runs, client):
    a, b = _run(client, demo_runs.first), _run(client, demo_runs.second)
    assert a.info.experiment_id == b.info.experiment_id
    assert a.info.status == b.info.status == "FINISHED"

    def step_metrics(run):  # system metrics depend on what the monitor sampled in time
        return {k for k in run.data.metrics if not k.startswith("system/")}

    assert step_metrics(a) == step_metrics(b)
    assert {"loss", "lr", "tokens_per_s", "data_wait_fraction", "consumer_lag", "dead_letters"} <= step_metrics(a)
    assert not any(k.startswith("expert_load/") and k.rsplit("/", 1)[1][1:].isdigit() for k in step_metrics(a))
    assert set(a.data.params) == set(b.data.params)
    assert set(a.data.tags) == set(b.data.tags)
    for run, training in ((a, demo_runs.first), (b, demo_runs.second)):
        tags = run.data.tags
        assert tags["dagster_run_id"] == training.run_id and tags["asset"] == "deepseek_checkpoint"
        assert tags["code_version"] and len(tags["config_hash"]) == 16
    assert a.data.tags["config_hash"] == b.data.tags["config_hash"]  # same configuration, same hash
    # the topic's batches when each trained
    assert a.data.tags["partition"] == demo_runs.batches[0]
    assert b.data.tags["partition"] == ",".join(demo_runs.batches)


def test_each_checkpoint_is_a_model_version_with_its_lineage_and_the_alias_moves(demo_runs, client):
    name = demo_runs.model_name
    versions = sorted(client.search_model_versions(f"name='{name}'"), key=lambda v: int(v.version))
    assert [v.version for v in versions] == ["1", "2"]
    for version, training in zip(versions, (demo_runs.first, demo_runs.second)):
        meta = training.metadata
        assert version.run_id == meta["mlflow_run_id"] and version.source == meta["hf_uri"]
        assert meta["registered_model"] == f"{name} v{version.version}"
        tags = version.tags
        assert tags["dagster_run_id"] == training.run_id
        assert json.loads(tags["offsets"]) == meta["offsets_consumed"]
        assert tags["checkpoint_uri"] == meta["checkpoint_uri"] and tags["step"] == str(meta["end_step"])
        assert tags["config_hash"] == client.get_run(version.run_id).data.tags["config_hash"]
    for version in versions:
        assert version.tags["partitions"] == client.get_run(version.run_id).data.tags["partition"]
    # the second training read on from where the first stopped: its offsets start at the first's ends
    first, second = (json.loads(v.tags["offsets"]) for v in versions)
    assert all(start >= first.get(p, [0, 0])[1] - 1 for p, (start, _end) in second.items())
    assert client.get_model_version_by_alias(name, CHECKPOINT_ALIAS).version == "2"


def test_inputs_are_the_kafka_offsets_and_the_shard_manifests(demo_runs, client):
    run = _run(client, demo_runs.second)
    datasets = {d.dataset.name: d for d in run.inputs.dataset_inputs}
    kafka = datasets[f"kafka:{demo_runs.layout.topic.name}"]
    assert (
        kafka.dataset.source_type == "kafka"
        and json.loads(kafka.dataset.source)["topic"] == demo_runs.layout.topic.name
    )
    assert json.loads(kafka.dataset.profile)["num_rows"] == len(demo_runs.second.metadata["offsets_consumed"])
    assert {t.key: t.value for t in kafka.tags}["mlflow.data.context"] == "training"
    shards = datasets["cleaned_shards"]
    assert (
        json.loads(shards.dataset.source)["uri"] == f"s3://{demo_runs.layout.bucket}/{demo_runs.layout.shards_prefix}"
    )
    # the batches whose offsets the run read: the new one, and the first when its last message was partly read
    assert json.loads(shards.dataset.profile)["num_rows"] in (1, 2)
    first_inputs = {d.dataset.name: d for d in _run(client, demo_runs.first).inputs.dataset_inputs}
    assert json.loads(first_inputs["cleaned_shards"].dataset.profile)["num_rows"] == 1


def test_the_loss_curve_is_an_artifact_and_in_the_materialization(demo_runs, client):
    meta = demo_runs.second.metadata
    run_id = meta["mlflow_run_id"]
    assert "loss_curve.png" in [f.path for f in client.list_artifacts(run_id)]
    markdown = meta["loss_curve"]
    url = markdown.split("](", 1)[1].split(")", 1)[0]
    assert url.startswith(demo_runs.mlflow_url) and run_id in url
    with urllib.request.urlopen(url, timeout=10) as resp:
        assert resp.read(8) == b"\x89PNG\r\n\x1a\n"
    assert meta["model_version_url"].endswith(f"/#/models/{demo_runs.model_name}/versions/2")
