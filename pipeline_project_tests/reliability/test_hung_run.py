"""A hung training run (its trainer sleeps forever, its worker alive) does not hold the training slot: run
monitoring fails it once it has run past its `dagster/max_runtime` tag (PIPELINE_TRAINING_MAX_RUNTIME_S, 30 s
here) and run retries launch it again, on the throw-away stack's own webserver + daemon and the real definitions.

The hang: a `sitecustomize` on the deployment's PYTHONPATH that sleeps in any process started with the trainer's
job (PIPELINE_TRAINER_JOB), i.e. the trainer subprocess the `deepseek_checkpoint` step launches.
"""

from __future__ import annotations

import os

import pytest

from pipeline_project_harness.reliability.dagster_faults import (
    dagster_instance,
    retry_of,
    run_story,
    start_dagster,
    status_of,
    wait_for,
)
from pipeline_project_harness.reliability.stacks import stop_leftovers

pytestmark = pytest.mark.stack

MAX_RUNTIME_S = 30
POLL_S = 15  # run_monitoring.poll_interval_seconds of the stack's instance (stack/dagster.py)

HANG = """
import os, time
if os.environ.get("PIPELINE_TRAINER_JOB"):
    open(os.path.join({marks!r}, str(os.getpid())), "w").close()
    while True:
        time.sleep(60)
"""


@pytest.fixture
def hanging_deployment(fault_stack, tmp_path, monkeypatch):
    marks = tmp_path / "hung"
    marks.mkdir()
    (tmp_path / "sitecustomize.py").write_text(HANG.format(marks=str(marks)))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("PIPELINE_TRAINING_MAX_RUNTIME_S", str(MAX_RUNTIME_S))
    start_dagster(fault_stack)  # its processes take this environment
    service = fault_stack.services["dagster"]
    wait_for("the code location to load", lambda: set(service.code_locations().values()) == {"loaded"}, 120)
    instance = dagster_instance(fault_stack)
    try:
        yield fault_stack, instance, marks
    finally:
        instance.dispose()
        fault_stack.down(["dagster"])
        stop_leftovers(fault_stack.state_dir)  # the hung trainers carry the stack's DAGSTER_HOME


def _submit_training(stack) -> str:
    from dagster_graphql import DagsterGraphQLClient

    host, port = stack.config.dagster_url.removeprefix("http://").rsplit(":", 1)
    return DagsterGraphQLClient(host, port_number=int(port)).submit_job_execution("train_checkpoint", run_config={})


def test_a_hung_training_run_is_failed_by_run_monitoring_and_retried(hanging_deployment):
    import dagster as dg

    stack, instance, marks = hanging_deployment
    run_id = _submit_training(stack)
    story = lambda: run_story(instance, run_id)  # noqa: E731
    assert instance.get_run_by_id(run_id).tags.get("dagster/max_runtime") == str(MAX_RUNTIME_S)

    wait_for("the trainer to hang", lambda: any(marks.iterdir()), 120, story=story)
    assert status_of(instance, run_id) == dg.DagsterRunStatus.STARTED  # hung, not dead: its worker is alive

    wait_for("run monitoring to fail the hung run", lambda: instance.get_run_by_id(run_id).is_finished, 90, 1.0,
             story=story)  # fmt: skip
    record = instance.get_run_record_by_id(run_id)
    assert record.dagster_run.status == dg.DagsterRunStatus.FAILURE, story()
    ran_s = record.end_time - record.start_time
    assert MAX_RUNTIME_S <= ran_s <= MAX_RUNTIME_S + POLL_S + 20, (ran_s, story())
    assert any("Exceeded maximum runtime" in (e.message or "") for e in instance.all_logs(run_id)), story()

    retry = wait_for("run retries to relaunch it", lambda: retry_of(instance, run_id), 90, 1.0, story=story)
    assert retry.tags.get("dagster/max_runtime") == str(MAX_RUNTIME_S)  # the retry is bounded as well
    # the one training slot is free again: the retry starts (the instance lets one training run run at a time)
    # (a retry is created NOT_STARTED, then queued, then dequeued into the slot)
    past_the_queue = (dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.FAILURE)
    wait_for("the retry to start", lambda: status_of(instance, retry.run_id) in past_the_queue, 90, 1.0,
             story=lambda: run_story(instance, retry.run_id))  # fmt: skip
