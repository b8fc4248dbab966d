"""The operator's commands read the deployment's own Dagster instance, say which, and refuse to read none.

`status` and `batches` used to open whatever $DAGSTER_HOME (or the local stack's folder) held; in a pod with no
instance configured Dagster made an empty one and the commands reported nothing wrong. `batches --failed` looked
only at the newest 500 batches."""

from __future__ import annotations

import dagster as dg
import pytest
from dagster._core.test_utils import create_run_for_test
from typer.testing import CliRunner

from pipeline_project.cli import context
from pipeline_project.cli.app import app
from pipeline_project.defs.instance import PARTITION_TAG, batch_outcomes
from pipeline_project.defs.partitions import batches


@pytest.mark.parametrize("command", [["status"], ["batches", "--failed"]])
def test_a_command_with_no_instance_configured_fails_in_one_line(command, tmp_path, monkeypatch):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "nothing-here"))
    out = CliRunner().invoke(app, command)
    assert out.exit_code == 1
    lines = out.output.strip().splitlines()
    assert len(lines) == 1 and "no Dagster instance at" in lines[0] and "DAGSTER_HOME" in lines[0], out.output
    assert not (tmp_path / "nothing-here" / "storage").exists()  # nothing was made there


def test_the_instance_read_is_named(tmp_path):
    (tmp_path / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    with context.dagster_instance(tmp_path) as instance:
        said = context.describe_instance(instance)
    assert said.startswith(f"Dagster instance {tmp_path} (") and "SqliteRunStorage" in said


def test_failed_lists_a_batch_older_than_the_newest_five_hundred():
    with dg.instance_for_test() as instance:
        names = [f"b{i:05d}" for i in range(600)]
        instance.add_dynamic_partitions(batches.name, names)
        create_run_for_test(
            instance, job_name="ingest_batch", status=dg.DagsterRunStatus.FAILURE, tags={PARTITION_TAG: names[0]}
        )
        create_run_for_test(
            instance,
            job_name="ingest_batch",
            status=dg.DagsterRunStatus.FAILURE,
            tags={PARTITION_TAG: names[599], "dagster/will_retry": "true"},
        )
        failed = batch_outcomes(instance, failed_only=True)
        assert [(o.batch, o.status) for o in failed] == [(names[0], "failed")]
        assert [o.status for o in batch_outcomes(instance, only={names[599]})] == ["retrying"]
