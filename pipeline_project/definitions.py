"""The one `Definitions` of the project, named by workspace.yaml and [tool.dagster]."""

import dagster as dg

from pipeline_project.assets import checkpoint, cleaned, raw, token_blocks
from pipeline_project.assets.checkpoint import deepseek_checkpoint
from pipeline_project.resources import build_resources
from pipeline_project.sensors.checkpoint_trigger import checkpoint_trigger_sensor
from pipeline_project.sensors.raw_s3 import raw_s3_sensor

_modules = [raw, cleaned, token_blocks, checkpoint]

defs = dg.Definitions(
    assets=dg.load_assets_from_modules(_modules),
    asset_checks=dg.load_asset_checks_from_modules(_modules),
    sensors=[raw_s3_sensor, checkpoint_trigger_sensor],
    jobs=[dg.define_asset_job("train_checkpoint", selection=[deepseek_checkpoint])],
    resources=build_resources(),
)
