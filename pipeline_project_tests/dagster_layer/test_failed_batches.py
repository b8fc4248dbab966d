"""A batch that fails for good is listed with its error and objects (`pipeline-project batches --failed`)."""

import json

import dagster as dg
import pytest
from typer.testing import CliRunner

from pipeline_project.cli import context
from pipeline_project.cli.app import app
from pipeline_project.definitions import defs
from pipeline_project.defs.assets.cleaned import cleaned_shards
from pipeline_project.defs.assets.raw import raw_text
from pipeline_project.defs.instance import batch_outcomes
from pipeline_project.defs.sensors.raw_s3 import raw_s3_sensor
from pipeline_project.ingest.manifest import read_manifest
from pipeline_project_tests.dagster_layer.test_unreadable_objects import FaultyS3Resource

pytestmark = pytest.mark.stack


def _batch(instance, resources, s3, layout, names) -> str:
    for name in names:
        s3.put_object(Bucket=layout.bucket, Key=layout.raw_prefix + name, Body=f"text of {name} " * 30)
    sensor_res = {k: resources[k] for k in ("s3", "layout")}
    cursor = None
    with dg.build_sensor_context(instance=instance, resources=sensor_res, definitions=defs, cursor=cursor) as ctx:
        batch = raw_s3_sensor(ctx).run_requests[0].partition_key
    instance.add_dynamic_partitions("batches", [batch])
    return batch


def test_a_batch_that_fails_for_good_is_listed_with_its_error_and_objects(instance, resources, layout, s3, monkeypatch):
    names = ["a.txt", "b.txt", "c.txt"]
    batch = _batch(instance, resources, s3, layout, names)
    monkeypatch.setattr(dg.RetryPolicy, "calculate_delay", lambda *a: 0)  # the step's 5 retries, without the waits
    faulty = FaultyS3Resource(**resources["s3"].model_dump(), faults={layout.raw_prefix + "b.txt": "SlowDown"})
    result = dg.materialize(
        [raw_text, cleaned_shards],
        resources={**resources, "s3": faulty},
        partition_key=batch,
        instance=instance,
        raise_on_error=False,
    )
    assert not result.success  # throttled past its retries: transient errors still fail the batch

    rows = batch_outcomes(instance, lambda b: read_manifest(s3, layout.bucket, b), failed_only=True)
    assert [(r.batch, r.status, r.step) for r in rows] == [(batch, "failed", "cleaned_shards")]
    assert "SlowDown" in rows[0].error
    assert sorted(rows[0].objects) == sorted(layout.raw_prefix + n for n in names)

    monkeypatch.setattr(context, "dagster_instance", lambda home: instance)
    monkeypatch.setattr(instance, "__exit__", lambda *a: None)
    out = CliRunner().invoke(app, ["batches", "--failed", "--json"])
    assert out.exit_code == 0, out.output
    listed = [json.loads(line) for line in out.stdout.splitlines()]
    assert [(r["batch"], r["status"]) for r in listed] == [(batch, "failed")]
    assert sorted(listed[0]["objects"]) == sorted(layout.raw_prefix + n for n in names)
    human = CliRunner().invoke(app, ["batches"])
    assert batch in human.output and "failed" in human.output and "SlowDown" in human.output


def test_a_batch_that_fails_for_good_is_a_failed_check_in_the_ui_with_its_objects(
    instance, resources, layout, s3, monkeypatch
):
    from pipeline_project.defs.assets.batch_failures import CHECK_NAME, failed_batch_sensor

    names = ["a.txt", "b.txt"]
    batch = _batch(instance, resources, s3, layout, names)
    monkeypatch.setattr(dg.RetryPolicy, "calculate_delay", lambda *a: 0)
    faulty = FaultyS3Resource(**resources["s3"].model_dump(), faults={layout.raw_prefix + "a.txt": "SlowDown"})
    result = dg.materialize(
        [raw_text, cleaned_shards],
        resources={**resources, "s3": faulty},
        partition_key=batch,
        instance=instance,
        raise_on_error=False,
    )
    assert not result.success
    run = instance.get_run_by_id(result.run_id)
    [failure] = instance.all_logs(run.run_id, of_type=dg.DagsterEventType.RUN_FAILURE)
    sensor_res = {k: resources[k] for k in ("s3", "layout")}
    ctx = dg.build_run_status_sensor_context(
        sensor_name=failed_batch_sensor.name,
        dagster_event=failure.dagster_event,
        dagster_instance=instance,
        dagster_run=run,
        resources=sensor_res,
    )
    failed_batch_sensor(ctx.for_run_failure())

    # what the UI shows on token_blocks' Checks tab: the newest evaluation of batch_not_failed for the batch
    check_key = dg.AssetCheckKey(dg.AssetKey("token_blocks"), CHECK_NAME)
    [record] = instance.event_log_storage.get_asset_check_execution_history(check_key, limit=5)
    evaluation = record.event.dagster_event.event_specific_data
    assert (evaluation.partition, evaluation.passed) == (batch, False)
    assert evaluation.severity == dg.AssetCheckSeverity.ERROR
    metadata = {k: v.value for k, v in evaluation.metadata.items()}
    assert metadata["step"] == "cleaned_shards" and "SlowDown" in metadata["error"]
    assert metadata["run_id"] == run.run_id and metadata["object_count"] == len(names)
    for name in names:
        assert f"s3://{layout.bucket}/{layout.raw_prefix}{name}" in metadata["objects"]


def test_a_batch_that_gets_through_passes_batch_not_failed_in_its_run(instance, resources, layout, s3):
    from pipeline_project.defs.assets.batch_failures import CHECK_NAME, batch_not_failed
    from pipeline_project.defs.assets.token_blocks import token_blocks

    batch = _batch(instance, resources, s3, layout, ["ok.txt"])
    result = dg.materialize(
        [raw_text, cleaned_shards, token_blocks, batch_not_failed],
        resources=resources,
        partition_key=batch,
        instance=instance,
    )
    [evaluation] = [e for e in result.get_asset_check_evaluations() if e.check_name == CHECK_NAME]
    assert (evaluation.partition, evaluation.passed) == (batch, True)
    assert evaluation.metadata["status"].value == "done"
