"""One demo on the local stack, shared by the MLflow and browser tests of this package (built once per session).

`demo_runs`: the stack's Dagster (webserver + daemon on PostgreSQL, started when not running) records two ingests
and two trainings of one checkpoint lineage, materialized in process into the stack's own instance, so its UI
shows them: batch 1 -> train (run A), batch 2 -> train again (run B, continuing from A's checkpoint, with the
asset checks). Each training is one MLflow run and one registered model version. Data of this session only
(prefixes, topic, lineage and registered model named by a fresh id).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

import dagster as dg
import pytest

from pipeline_project.defs.resources.layout import PipelineLayout, TopicConfig


@dataclass(frozen=True)
class Training:
    run_id: str  # the Dagster run
    metadata: dict  # the deepseek_checkpoint materialization's metadata, plain values
    checks: dict  # check name -> passed


@dataclass(frozen=True)
class DemoRuns:
    dagster_url: str
    mlflow_url: str
    model_name: str
    layout: PipelineLayout
    batches: tuple[str, str]
    first: Training
    second: Training


def _ingest(instance, resources, layout, s3, files, cursor):
    from pipeline_project.defs.assets import cleaned, raw, token_blocks
    from pipeline_project.defs.partitions import batches
    from pipeline_project.defs.sensors.raw_s3 import raw_s3_sensor

    for f in files:
        s3.put_object(Bucket=layout.bucket, Key=layout.raw_prefix + f.key, Body=f.data)
    sensor_resources = {k: resources[k] for k in ("s3", "layout")}
    with dg.build_sensor_context(instance=instance, cursor=cursor, resources=sensor_resources) as ctx:
        tick = raw_s3_sensor(ctx)
    batch = tick.run_requests[0].partition_key
    instance.add_dynamic_partitions(batches.name, [batch])
    assets = [raw.raw_text, cleaned.cleaned_shards, token_blocks.token_blocks]
    assert dg.materialize(assets, resources=resources, partition_key=batch, instance=instance).success
    return batch, tick.cursor


def _train(instance, resources, *, with_checks: bool) -> Training:
    from pipeline_project.defs.assets import checkpoint

    defs = [checkpoint.deepseek_checkpoint]
    if with_checks:
        defs += [checkpoint.loss_is_finite, checkpoint.checkpoint_reloads]
    result = dg.materialize(defs, resources=resources, instance=instance)
    assert result.success
    mat = result.get_asset_materialization_events()[0].materialization
    checks = {e.check_name: e.passed for e in result.get_asset_check_evaluations()}
    return Training(result.run_id, {k: getattr(v, "value", v) for k, v in mat.metadata.items()}, checks)


@pytest.fixture(scope="session")
def demo_runs(local_stack, stack, stack_dagster) -> DemoRuns:
    from pipeline_project.defs.resources import build_resources
    from pipeline_project.defs.resources.cleaning import CleaningResource
    from pipeline_project.defs.resources.dedup import DedupIndexResource
    from pipeline_project.defs.resources.trainer import TrainerResource
    from pipeline_project.demo.sample.corpus import generate

    uid = uuid.uuid4().hex[:8]
    layout = PipelineLayout(
        raw_prefix=f"ui-{uid}/raw/",
        shards_prefix=f"ui-{uid}/shards/",
        exclusions_prefix=f"ui-{uid}/exclusions/",
        checkpoints_prefix=f"ui-{uid}/checkpoints/",
        topic=TopicConfig(name=f"ui-{uid}-blocks", seq_len=64, message_bytes=16 * 1024),
    )
    resources = build_resources(stack)
    resources.update(
        layout=layout,
        dedup=DedupIndexResource(postgres_url=stack.postgres_url, schema_name=f"ui_{uid}"),
        cleaning=CleaningResource(workers=1),
        trainer=TrainerResource(
            run_name=f"demo-{uid}",
            batch_size=4,
            lr=3e-3,
            warmup_steps=2,
            experiment_name=f"ui-test-{uid}",
            log_model_to_mlflow=False,  # the registry's versions point at the S3 checkpoints
        ),
    )
    sample = generate(seed=3, docs_per_language=3)
    half = len(sample) // 2
    one = [type(f)(f.key.replace("raw/sample/", "one/"), f.data) for f in sample[:half]]
    two = [type(f)(f.key.replace("raw/sample/", "two/"), f.data) for f in sample[half:]]
    instance = dg.DagsterInstance.from_config(str(stack_dagster))
    try:
        s3 = stack.s3_client()
        t0 = time.monotonic()
        batch1, cursor = _ingest(instance, resources, layout, s3, one, None)
        t1 = time.monotonic()
        first = _train(instance, resources, with_checks=False)
        t2 = time.monotonic()
        batch2, _ = _ingest(instance, resources, layout, s3, two, cursor)
        t3 = time.monotonic()
        second = _train(instance, resources, with_checks=True)
        print(
            f"demo: ingest {t1 - t0:.0f}s train {t2 - t1:.0f}s ingest {t3 - t2:.0f}s train+checks {time.monotonic() - t3:.0f}s"
        )
    finally:
        instance.dispose()
    yield DemoRuns(
        dagster_url=local_stack.config.dagster_url,
        mlflow_url=stack.mlflow_tracking_uri,
        model_name=f"demo-{uid}",
        layout=layout,
        batches=(batch1, batch2),
        first=first,
        second=second,
    )
