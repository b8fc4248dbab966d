"""The shared stack (started by the session fixture or already running): health, idempotence, Kafka's own tools."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic
from mlflow.tracking import MlflowClient
from typer.testing import CliRunner

from pipeline_project.cli.app import app
from pipeline_project.settings import Settings
from pipeline_project.stack import Stack, kafka_tool
from pipeline_project.stack.s3 import s3_client


def test_status_reports_every_service_healthy_with_urls(local_stack: Stack, stack: Settings):
    statuses = {s.name: s for s in local_stack.status(["kafka", "s3", "mlflow"])}
    assert set(statuses) == {"kafka-1", "kafka-2", "kafka-3", "s3", "mlflow"}
    assert all(s.healthy for s in statuses.values()), statuses
    assert statuses["s3"].url == stack.s3_endpoint
    assert statuses["mlflow"].url == stack.mlflow_tracking_uri
    assert ",".join(statuses[f"kafka-{i}"].url for i in (1, 2, 3)) == stack.kafka_bootstrap
    assert "3/3 brokers live" in statuses["kafka-1"].detail


def test_status_cli_json_exits_zero_when_healthy(local_stack: Stack):
    result = CliRunner().invoke(
        app, ["stack", "status", "--json", "--services", "kafka,s3,mlflow", "--state-dir", str(local_stack.state_dir)]
    )
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert [r["name"] for r in rows] == ["kafka-1", "kafka-2", "kafka-3", "s3", "mlflow"]
    assert all(r["healthy"] and r["url"] for r in rows)


def test_up_again_starts_nothing_and_keeps_pids(local_stack: Stack):
    before = {mp.name: mp.pid for mp in local_stack.processes(["kafka", "s3", "mlflow"])}
    assert local_stack.up(["kafka", "s3", "mlflow"], timeout=60) == []
    after = {mp.name: mp.pid for mp in local_stack.processes(["kafka", "s3", "mlflow"])}
    assert after == before


def test_kafka_tools_from_the_same_jars_see_three_brokers_and_an_rf3_topic(stack: Settings):
    first = stack.kafka_bootstrap.split(",")[0]
    # Through the CLI passthrough, which fills in the stack's brokers as --bootstrap-server.
    cli = subprocess.run(
        [str(Path(sys.executable).with_name("pipeline-project")), "stack", "kafka-tool", "broker-api-versions"],
        capture_output=True,
        text=True,
        timeout=180,
        check=True,
    )
    assert sorted(int(i) for i in re.findall(r"\(id: (\d+) rack", cli.stdout)) == [1, 2, 3]

    quorum = kafka_tool("metadata-quorum", "--bootstrap-server", first, "describe", "--status").stdout
    assert re.search(r"LeaderId:\s+[123]\b", quorum)
    assert len(re.findall(r'"id": \d', quorum.split("CurrentVoters:")[1].splitlines()[0])) == 3

    topic = f"stack-test-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": stack.kafka_bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=3)])[topic].result(30)
    try:
        described = kafka_tool("topics", "--bootstrap-server", first, "--describe", "--topic", topic).stdout
        assert re.search(r"PartitionCount: 2\s+ReplicationFactor: 3", described), described
        assert (
            "min.insync.replicas=2"
            in kafka_tool(
                "configs",
                "--bootstrap-server",
                first,
                "--entity-type",
                "topics",
                "--entity-name",
                topic,
                "--describe",
                "--all",
            ).stdout
        )
    finally:
        admin.delete_topics([topic])[topic].result(30)


def test_buckets_exist_and_mlflow_proxies_artifacts_into_s3(stack: Settings, tmp_path):
    s3 = s3_client(stack.s3_endpoint, stack.s3_access_key, stack.s3_secret_key)
    names = {b["Name"] for b in s3.list_buckets()["Buckets"]}
    assert set(stack.buckets) <= names

    client = MlflowClient(tracking_uri=stack.mlflow_tracking_uri)
    experiment = f"stack-test-{uuid.uuid4().hex[:8]}"
    run = client.create_run(client.create_experiment(experiment))
    artifact = tmp_path / "note.txt"
    artifact.write_text("proxied")
    client.log_artifact(run.info.run_id, str(artifact))
    client.set_terminated(run.info.run_id)

    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=stack.mlflow_artifacts_bucket).get("Contents", [])]
    assert any(k.endswith(f"{run.info.run_id}/artifacts/note.txt") for k in keys), keys
