"""Batches that failed for good, in the Dagster UI: the `batch_not_failed` check of `token_blocks`, per batch.

`failed_batch_sensor` (a run failure sensor) records the check as failed (severity ERROR) for a batch whose
newest run failed and will not be retried, with the failed step, its error and the batch's objects in the
metadata; an ingest run that gets the batch through runs the check, which then passes. The same outcome, from
`batch_outcomes`, is what `pipeline-project batches --failed` lists.
"""

import dagster as dg
from dagster_aws.s3 import S3Resource

from pipeline_project.defs.assets.token_blocks import token_blocks
from pipeline_project.defs.instance import PARTITION_TAG, BatchOutcome, batch_outcomes
from pipeline_project.defs.partitions import batches
from pipeline_project.defs.resources.layout import PipelineLayout

CHECK_NAME = "batch_not_failed"
MAX_LISTED_OBJECTS = 200


def objects_table(bucket: str, keys: tuple[str, ...]) -> str:
    rows = [f"| s3://{bucket}/{key} |" for key in keys[:MAX_LISTED_OBJECTS]]
    more = [f"| ... and {len(keys) - MAX_LISTED_OBJECTS} more |"] if len(keys) > MAX_LISTED_OBJECTS else []
    return "\n".join(["| object |", "|---|", *rows, *more])


def failure_evaluation(outcome: BatchOutcome, bucket: str) -> dg.AssetCheckEvaluation:
    return dg.AssetCheckEvaluation(
        asset_key=token_blocks.key,
        check_name=CHECK_NAME,
        passed=False,
        partition=outcome.batch,
        severity=dg.AssetCheckSeverity.ERROR,
        description=f"batch {outcome.batch} failed for good in {outcome.step or 'its run'}: {outcome.error}",
        metadata={
            "run_id": outcome.run_id or "",
            "step": outcome.step,
            "error": outcome.error,
            "object_count": len(outcome.objects),
            "objects": dg.MetadataValue.md(objects_table(bucket, outcome.objects)),
        },
    )


@dg.asset_check(
    asset=token_blocks,
    name=CHECK_NAME,
    partitions_def=batches,
    description="The batch is not failed for good (failed_batch_sensor records the failures, with the objects).",
)
def batch_not_failed(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
    [outcome] = batch_outcomes(context.instance, only={context.partition_key}) or [BatchOutcome("", "not started")]
    return dg.AssetCheckResult(passed=outcome.status != "failed", metadata={"status": outcome.status})


@dg.run_failure_sensor(
    name="failed_batch_sensor",
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Records batch_not_failed as failed, with the error and objects, for a batch that failed for good.",
)
def failed_batch_sensor(context: dg.RunFailureSensorContext, s3: S3Resource, layout: PipelineLayout) -> None:
    from pipeline_project.ingest.manifest import read_manifest

    batch = context.dagster_run.tags.get(PARTITION_TAG)
    if not batch or not context.instance.has_dynamic_partition(batches.name, batch):
        return
    client = s3.get_client()
    outcomes = batch_outcomes(
        context.instance, lambda b: read_manifest(client, layout.bucket, b), failed_only=True, only={batch}
    )
    for outcome in outcomes:  # none while Dagster will retry the run, or once a newer run got the batch through
        context.instance.report_runless_asset_event(failure_evaluation(outcome, layout.bucket))
