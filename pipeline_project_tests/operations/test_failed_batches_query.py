"""`batches --failed` reads the failures of every failed batch in a bounded number of queries: a page of failure
events at a time across runs, not two queries per failed batch (16 ms each at 10^3 failed batches)."""

from __future__ import annotations

import dagster as dg
from dagster._core.events import DagsterEvent, DagsterEventType
from dagster._core.execution.plan.objects import StepFailureData
from dagster._core.test_utils import create_run_for_test
from dagster._utils.error import SerializableErrorInfo

from pipeline_project.defs.instance import PARTITION_TAG, batch_outcomes
from pipeline_project.defs.partitions import batches


def _error(message: str, cause: SerializableErrorInfo | None = None) -> SerializableErrorInfo:
    return SerializableErrorInfo(message=message, stack=[], cls_name="Failure", cause=cause)


def _failed_run(instance, batch: str, step_error: str | None):
    run = create_run_for_test(
        instance, job_name="ingest_batch", status=dg.DagsterRunStatus.FAILURE, tags={PARTITION_TAG: batch}
    )
    if step_error is not None:
        wrapped = _error("Exceeded max_retries of 5", cause=_error(f"{step_error}\nsecond line"))
        event = DagsterEvent(
            DagsterEventType.STEP_FAILURE.value,
            job_name="ingest_batch",
            step_key="cleaned_shards",
            event_specific_data=StepFailureData(error=wrapped, user_failure_data=None),
        )
        instance.report_dagster_event(event, run_id=run.run_id)
    run_failure = DagsterEvent(DagsterEventType.RUN_FAILURE.value, job_name="ingest_batch", message="run gave up")
    instance.report_dagster_event(run_failure, run_id=run.run_id)
    return run


def test_every_failed_batch_with_its_error_in_a_bounded_number_of_event_queries(monkeypatch):
    with dg.instance_for_test() as instance:
        names = [f"b{i:04d}" for i in range(60)]
        instance.add_dynamic_partitions(batches.name, names)
        for i, name in enumerate(names):
            _failed_run(instance, name, None if i % 10 == 3 else f"SlowDown on {name}")
        calls: list[str] = []
        storage = instance.event_log_storage
        for owner, method in [
            (o, m) for o in (instance, storage) for m in ("get_event_records", "get_records_for_run")
        ]:
            real = getattr(owner, method)
            monkeypatch.setattr(owner, method, lambda *a, _m=method, _r=real, **k: calls.append(_m) or _r(*a, **k))
        monkeypatch.setattr(
            instance, "all_logs", lambda *a, _r=instance.all_logs, **k: calls.append("all_logs") or _r(*a, **k)
        )

        failed = batch_outcomes(instance, failed_only=True)

        assert [o.batch for o in failed] == names
        for i, outcome in enumerate(failed):
            if i % 10 == 3:  # no step failed: the run's own failure
                assert (outcome.step, outcome.error) == ("", "run gave up")
            else:  # the newest step failure, unwrapped to its cause, first line
                assert (outcome.step, outcome.error) == ("cleaned_shards", f"SlowDown on {outcome.batch}")
        assert len(calls) <= 2, calls  # one page of step failures, one of run failures: not one per batch
