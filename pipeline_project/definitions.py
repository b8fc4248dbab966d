"""The one `Definitions` of the project, named by workspace.yaml and [tool.dagster]."""

import dagster as dg

from pipeline_project.defs.assets import (
    batch_failures,
    checkpoint,
    cleaned,
    content_summary,
    raw,
    takedowns,
    token_blocks,
)
from pipeline_project.defs.jobs import INGEST_JOB_TAGS, INGEST_SELECTION, ingest_batch, train_checkpoint
from pipeline_project.defs.resources import build_resources
from pipeline_project.defs.sensors.checkpoint_trigger import checkpoint_trigger_sensor
from pipeline_project.defs.sensors.raw_s3 import raw_s3_sensor
from pipeline_project.settings import Settings
from pipeline_project.stack.discovery import with_local_s3

_modules = [raw, cleaned, token_blocks, checkpoint, batch_failures, content_summary]

# Every run carries its kind, which the instance's tag concurrency limits count (deploy/dagster/dagster.yaml):
# the sensors' runs, the training job's, and the eager re-materializations the automation sensor launches.
ingest_automation_sensor = dg.AutomationConditionSensorDefinition(
    "ingest_automation_sensor",
    target=INGEST_SELECTION,
    run_tags=INGEST_JOB_TAGS,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Eager re-materialization of the ingest assets downstream of a changed batch, as ingest runs.",
)

defs = dg.Definitions(
    assets=[*dg.load_assets_from_modules(_modules), takedowns.takedown_report],
    asset_checks=dg.load_asset_checks_from_modules(_modules),
    sensors=[
        raw_s3_sensor,
        checkpoint_trigger_sensor,
        ingest_automation_sensor,
        batch_failures.failed_batch_sensor,
        takedowns.takedown_report_sensor,
    ],
    jobs=[ingest_batch, train_checkpoint],
    # the environment's settings; with no S3 endpoint set, the local stack's S3 while it runs (`dagster dev`)
    resources=build_resources(with_local_s3(Settings())),
)
