"""Watch the raw prefix; each tick turns the new objects into one batch partition and requests its run."""

import dagster as dg
from dagster_aws.s3 import S3Resource

from pipeline_project.defs.jobs import ingest_batch
from pipeline_project.defs.partitions import INGEST_RUN_TAGS, batches
from pipeline_project.defs.resources.layout import PipelineLayout
from pipeline_project.ingest.listing.plan import Limits, TickCursor, plan_tick
from pipeline_project.ingest.manifest import BatchManifest, make_batch_id, write_manifest_once


@dg.sensor(
    name="raw_s3_sensor",
    minimum_interval_seconds=15,
    default_status=dg.DefaultSensorStatus.RUNNING,
    job=ingest_batch,
    description="Lists the raw prefix after the cursor (keys after the last one taken), each source prefix "
    "(`source_prefix_depth` levels down) after its own cursor, and every `full_scan_every` ticks scans the keys "
    "before the cursor, a bounded number of pages per tick; new objects become "
    "one `batches` partition (at most max_objects_per_batch objects and max_batch_mb) with an immutable "
    "manifest, and one `ingest_batch` run of raw_text -> cleaned_shards -> token_blocks.",
)
def raw_s3_sensor(context: dg.SensorEvaluationContext, s3: S3Resource, layout: PipelineLayout) -> dg.SensorResult:
    cursor = TickCursor.from_json(context.cursor)
    client = s3.get_client()
    limits = Limits(
        max_objects=layout.intake.max_objects_per_batch,
        max_bytes=layout.intake.max_batch_mb << 20,
        full_scan_every=layout.intake.full_scan_every,
        scan_pages=layout.intake.full_scan_pages_per_tick,
        scan_seconds=layout.intake.full_scan_seconds_per_tick,
        lookback_s=layout.intake.full_scan_lookback_s,
        source_depth=layout.intake.source_prefix_depth,
        max_sources=layout.intake.max_source_prefixes,
    )
    taken, new_cursor = plan_tick(client, layout.bucket, layout.raw_prefix, cursor, limits)
    if not taken:
        return dg.SensorResult(
            skip_reason=f"no new objects under s3://{layout.bucket}/{layout.raw_prefix} ({new_cursor.kind} listing)",
            cursor=new_cursor.to_json(),
        )
    batch_id = make_batch_id(taken)
    manifest = write_manifest_once(client, BatchManifest(batch_id=batch_id, bucket=layout.bucket, objects=tuple(taken)))
    context.log.info(f"batch {batch_id}: {len(manifest.objects)} objects, {manifest.total_bytes} bytes")
    return dg.SensorResult(
        run_requests=[
            dg.RunRequest(
                run_key=batch_id, partition_key=batch_id, tags={"pipeline/batch": batch_id, **INGEST_RUN_TAGS}
            )
        ],
        dynamic_partitions_requests=[batches.build_add_request([batch_id])],
        cursor=new_cursor.to_json(),
    )
