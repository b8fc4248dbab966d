"""The Dagster deployment under faults: the throw-away stack's own webserver + daemon (DAGSTER_HOME under its
state dir, storage in its PostgreSQL, the instance config `stack/dagster.py` writes: QueuedRunCoordinator,
run_retries, run_monitoring) running the real definitions and the real raw S3 sensor.

1. SIGKILL a run's worker tree while its `token_blocks` step produces: the run must not stay STARTED (holding
   a run slot); run retries launch it again without a person; the retry succeeds; the batch is in the topic
   exactly once (ledger record, claimed ranges, read_committed).
2. SIGKILL the daemon with its code server and the run worker it launched, mid-run, while objects keep arriving
   (before, during the outage, after); restart it after more than a sensor interval. Every object lands in
   exactly one batch with one run; run monitoring fails the orphaned run, run retries relaunch it, it succeeds.
"""

from __future__ import annotations

import pytest

from pipeline_project_harness.reliability.dagster_faults import (
    daemon_kill_mid_run,
    dagster_instance,
    run_worker_kill,
    start_dagster,
)
from pipeline_project_harness.reliability.stacks import stop_leftovers

pytestmark = pytest.mark.stack


def test_the_stack_hands_its_own_postgres_to_what_it_launches(fault_stack):
    cfg = fault_stack.config
    env = cfg.client_env()
    assert env.get("PIPELINE_POSTGRES_URL") == cfg.postgres_url() or env.get("PIPELINE_POSTGRES_PORT") == str(
        cfg.postgres_port
    ), f"the processes of a stack on port {cfg.postgres_port} would use PostgreSQL on 15432"


@pytest.fixture(scope="module")
def deployment(fault_stack):
    start_dagster(fault_stack)
    instance = dagster_instance(fault_stack)
    try:
        yield fault_stack, instance
    finally:
        instance.dispose()
        fault_stack.down(["dagster"])
        stop_leftovers(fault_stack.state_dir)


def test_killed_run_worker_is_failed_and_retried_without_a_person(deployment):
    stack, instance = deployment
    r = run_worker_kill(stack, instance, delay_s=0.5)
    d = r.detail
    assert d["killed_during_run"], "the run finished before the kill: the trial missed"
    assert d["run_status"] == "FAILURE" and d["left_started_after_s"] < 60, d
    assert d["retry_status"] == "SUCCESS", d
    assert d["exactly_once"]["ok"], d["exactly_once"]


def test_daemon_killed_mid_run_while_objects_arrive(deployment):
    stack, instance = deployment
    r = daemon_kill_mid_run(stack, instance, down_s=20.0)
    d = r.detail
    assert d["sensor_ok"], d  # every object in exactly one batch, one sensor run per batch
    assert (r.lost, r.duplicated) == (0, 0)
    assert not d["monitoring_error_in_log"], f"run monitoring raised: {d}"
    assert d["left_started_after_s"] is not None, f"the orphaned run stayed STARTED: {d}"
    assert d["retry_status"] == "SUCCESS" and d["exactly_once"]["ok"], d
