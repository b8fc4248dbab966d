"""The demo's runner relies on no private Dagster name: the one Dagster convention it reads is checked here."""

import dagster as dg

from pipeline_project.defs.sensors.checkpoint_trigger import checkpoint_trigger_sensor
from pipeline_project.demo.runner import SENSOR_NAME_TAG


def test_the_sensor_tag_the_demo_reads_is_the_one_dagster_writes_on_sensor_launched_runs():
    # the daemon tags each run a sensor launches with `DagsterRun.tags_for_sensor(sensor)` (dagster/_daemon/sensor.py)
    tags = dg.DagsterRun.tags_for_sensor(checkpoint_trigger_sensor)
    assert tags == {SENSOR_NAME_TAG: "checkpoint_trigger_sensor"}
