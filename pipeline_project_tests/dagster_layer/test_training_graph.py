"""The whole graph on the real stack: S3 -> shards -> Kafka -> DeepSeek checkpoint (tiny, CPU) -> MLflow."""

import dagster as dg
import pytest
from mlflow.tracking import MlflowClient

import pipeline_project.defs.assets.checkpoint as checkpoint_module
import pipeline_project.defs.assets.cleaned as cleaned_module
import pipeline_project.defs.assets.raw as raw_module
import pipeline_project.defs.assets.token_blocks as token_blocks_module
from pipeline_project.defs.partitions import batches
from pipeline_project.defs.resources.trainer import TrainerResource
from pipeline_project.defs.sensors.raw_s3 import raw_s3_sensor
from pipeline_project.demo.sample.corpus import generate

pytestmark = pytest.mark.stack

INGEST = [raw_module, cleaned_module, token_blocks_module]


def _ingest(instance, resources, layout, s3, files, cursor):
    for f in files:
        s3.put_object(Bucket=layout.bucket, Key=layout.raw_prefix + f.key, Body=f.data)
    with dg.build_sensor_context(
        instance=instance, cursor=cursor, resources={k: resources[k] for k in ("s3", "layout")}
    ) as ctx:
        tick = raw_s3_sensor(ctx)
    batch = tick.run_requests[0].partition_key
    instance.add_dynamic_partitions(batches.name, [batch])
    assets = dg.load_assets_from_modules(INGEST)
    result = dg.materialize(assets, resources=resources, partition_key=batch, instance=instance)
    assert result.success
    return batch, tick.cursor


def _train(instance, resources):
    defs = [*dg.load_assets_from_modules([checkpoint_module]), *dg.load_asset_checks_from_modules([checkpoint_module])]
    result = dg.materialize(
        defs, resources=resources, instance=instance, selection=[checkpoint_module.deepseek_checkpoint.key]
    )
    assert result.success
    mat = result.get_asset_materialization_events()[0].materialization
    checks = {e.check_name: e for e in result.get_asset_check_evaluations()}
    return {k: getattr(v, "value", v) for k, v in mat.metadata.items()}, checks


def test_two_checkpoints_continue_from_saved_offsets_and_reload(instance, resources, layout, s3, stack, uid):
    resources["trainer"] = TrainerResource(run_name=f"it-{uid}", batch_size=4, lr=3e-3, warmup_steps=2)
    sample = [f for f in generate(seed=3, docs_per_language=8)]
    first_files = [type(f)(f.key.replace("raw/sample/", "one/"), f.data) for f in sample[:5]]
    batch1, cursor = _ingest(instance, resources, layout, s3, first_files, None)

    meta1, checks1 = _train(instance, resources)
    assert meta1["status"] == "trained" and meta1["steps"] > 0
    assert checks1["loss_is_finite"].passed
    assert checks1["checkpoint_reloads"].passed, checks1["checkpoint_reloads"].metadata
    assert len(checks1["checkpoint_reloads"].metadata["generated_token_ids"].value) == 4
    consumed1 = meta1["offsets_consumed"]
    assert consumed1 and all(start == 0 for start, _ in consumed1.values())

    run = MlflowClient(stack.mlflow_tracking_uri).get_run(meta1["mlflow_run_id"])
    assert run.data.tags.get("dagster.run_id") or run.data.tags.get("dagster_run_id")
    assert "loss" in run.data.metrics and "tokens_per_s" in run.data.metrics
    assert meta1["mlflow_run_url"].startswith(stack.mlflow_tracking_uri)

    second_files = [type(f)(f.key.replace("raw/sample/", "two/"), f.data) for f in sample[5:8]]
    batch2, _ = _ingest(instance, resources, layout, s3, second_files, cursor)
    assert batch2 != batch1
    meta2, checks2 = _train(instance, resources)
    assert checks2["checkpoint_reloads"].passed
    assert meta2["resumed_from"] == meta1["checkpoint_uri"]
    consumed2 = meta2["offsets_consumed"]
    for partition, (start, _end) in consumed2.items():
        # only new blocks: every partition starts where the first checkpoint stopped (or 0 if untouched)
        assert start == consumed1.get(partition, [0, 0])[1]
