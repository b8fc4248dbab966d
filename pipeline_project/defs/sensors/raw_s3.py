"""Watch the raw prefix; each tick turns the new objects into as many batch partitions as they fill (up to
`max_batches_per_tick`) and requests one run per batch. The planning and the manifests are
`ingest.listing.intake.intake_tick`, which says what a crash at each point leaves."""

import dagster as dg
from dagster_aws.s3 import S3Resource

from pipeline_project.defs.jobs import ingest_batch
from pipeline_project.defs.partitions import INGEST_RUN_TAGS, batches
from pipeline_project.defs.resources.layout import PipelineLayout
from pipeline_project.ingest.listing.cursor import TickCursor
from pipeline_project.ingest.listing.intake import intake_tick


@dg.sensor(
    name="raw_s3_sensor",
    minimum_interval_seconds=15,
    default_status=dg.DefaultSensorStatus.RUNNING,
    job=ingest_batch,
    description="Lists the raw prefix after the cursor (keys after the last one taken), each source prefix "
    "(`source_prefix_depth` levels down) after its own cursor, and every `full_scan_every` ticks scans the keys "
    "before the cursor, a bounded number of pages per tick; new objects become as many `batches` partitions as "
    "they fill (each at most max_objects_per_batch objects and max_batch_mb; at most max_batches_per_tick per "
    "tick, and none opened after max_tick_seconds), each with an immutable manifest and one `ingest_batch` run "
    "of raw_text -> cleaned_shards -> token_blocks.",
)
def raw_s3_sensor(context: dg.SensorEvaluationContext, s3: S3Resource, layout: PipelineLayout) -> dg.SensorResult:
    tick = intake_tick(
        s3.get_client(), layout.bucket, layout.raw_prefix, TickCursor.from_json(context.cursor), layout.intake.limits()
    )
    if not tick.manifests:
        return dg.SensorResult(
            skip_reason=f"no new objects under s3://{layout.bucket}/{layout.raw_prefix} ({tick.cursor.kind} listing)",
            cursor=tick.cursor.to_json(),
        )
    ids = [m.batch_id for m in tick.manifests]
    more = f"; stopped by {tick.stopped_by}, more on the next tick" if tick.stopped_by else ""
    context.log.info(
        f"{len(ids)} batches ({ids[0]} .. {ids[-1]}): {tick.objects} objects, {tick.total_bytes} bytes{more}"
    )
    return dg.SensorResult(
        run_requests=[
            dg.RunRequest(run_key=b, partition_key=b, tags={"pipeline/batch": b, **INGEST_RUN_TAGS}) for b in ids
        ],
        dynamic_partitions_requests=[batches.build_add_request(ids)],
        cursor=tick.cursor.to_json(),
    )
