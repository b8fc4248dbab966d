"""The cluster's intake is sized for ~100 TB of raw text a day (issue 38 section 2): its batches are IntakeConfig
fields, and one tick every 15 s registers the steady arrival rate with room to take a backlog."""

from __future__ import annotations

from pipeline_project.defs.resources.layout import IntakeConfig
from pipeline_project_tests.deploy.helpers import K8S, yaml_docs

TB_PER_DAY = 100
TICK_S = 15  # raw_s3_sensor's minimum_interval_seconds
BACKLOG_HEADROOM = 10  # a tick can take at least ten ticks' worth of arrivals


def test_the_cluster_intake_registers_100_tb_a_day_with_room_for_a_backlog():
    (config,) = [d for d in yaml_docs(K8S / "base" / "settings.yaml") if d["kind"] == "ConfigMap"]
    intake = IntakeConfig.from_json(config["data"]["PIPELINE_INTAKE"])  # unknown fields are refused
    per_tick = TB_PER_DAY * 1e12 / 86400 * TICK_S
    capacity = intake.max_batches_per_tick * intake.max_batch_mb * 2**20
    assert capacity >= BACKLOG_HEADROOM * per_tick
    assert intake.max_batch_mb > IntakeConfig().max_batch_mb, "fewer, larger runs than a laptop's"
    assert intake.max_tick_seconds < 60, "Dagster's sensor timeout"
