"""Watch the raw prefix; each tick turns the new objects into one batch partition and requests its run."""

import dagster as dg
from dagster_aws.s3 import S3Resource
from dagster_aws.s3.sensor import get_objects

from pipeline_project.assets.cleaned import cleaned_shards
from pipeline_project.assets.partitions import INGEST_RUN_TAGS, batches
from pipeline_project.assets.raw import raw_text
from pipeline_project.assets.token_blocks import token_blocks
from pipeline_project.ingest import BatchManifest, SensorCursor, make_batch_id, plan_batch, write_manifest_once
from pipeline_project.resources.layout import PipelineLayout

INGEST_SELECTION = [raw_text, cleaned_shards, token_blocks]


@dg.sensor(
    name="raw_s3_sensor",
    minimum_interval_seconds=15,
    default_status=dg.DefaultSensorStatus.RUNNING,
    asset_selection=INGEST_SELECTION,
    description="Lists the raw prefix since the cursor; new objects become one `batches` partition "
    "with an immutable manifest, and one run of raw_text -> cleaned_shards -> token_blocks.",
)
def raw_s3_sensor(context: dg.SensorEvaluationContext, s3: S3Resource, layout: PipelineLayout) -> dg.SensorResult:
    cursor = SensorCursor.from_json(context.cursor)
    client = s3.get_client()
    listing = get_objects(
        layout.bucket, prefix=layout.raw_prefix, since_last_modified=cursor.list_since(), client=client
    )
    taken, new_cursor = plan_batch(listing, cursor, layout.max_objects_per_batch)
    if not taken:
        return dg.SensorResult(
            skip_reason=f"no new objects under s3://{layout.bucket}/{layout.raw_prefix}", cursor=cursor.to_json()
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
