"""The checkpoint trigger judges what its runs achieved: a run that trained nothing is not requested again until new
data arrives, a failed one is requested again after a growing backoff, a triggered run is bounded and the rest of
the backlog follows, and the demo's run never waits behind a triggered one. A test instance, no services."""

import time
from types import SimpleNamespace

import dagster as dg
import pytest
from dagster._core.events import DagsterEvent, DagsterEventType, StepMaterializationData
from dagster._core.remote_origin import RegisteredCodeLocationOrigin, RemoteRepositoryOrigin
from dagster._core.storage.tags import RUN_KEY_TAG, SENSOR_NAME_TAG
from dagster._core.test_utils import create_run_for_test

import pipeline_project.defs.sensors.checkpoint_trigger as trigger
from pipeline_project.defs.partitions import TRAINING_RUN_TAGS
from pipeline_project.defs.resources import training_trigger
from pipeline_project.defs.resources.trainer import trainer_from_settings
from pipeline_project.defs.sensors.trigger_policy import TriggerCursor, hold_trigger, release_trigger, retry_delay
from pipeline_project.settings import Settings
from pipeline_project_tests.dagster_layer.standins import without_postgres

ORIGIN = RemoteRepositoryOrigin(RegisteredCodeLocationOrigin("tests"), "__repository__").get_job_origin("__ASSET_JOB")
SENSOR = "checkpoint_trigger_sensor"


@pytest.fixture
def clock(monkeypatch):
    """The sensor's clock, moved by the test; it starts a minute after the events the test reports in real time."""
    now = SimpleNamespace(t=time.time() + 60)
    monkeypatch.setattr(trigger, "time", SimpleNamespace(time=lambda: now.t))
    monkeypatch.setenv("PIPELINE_MIN_NEW_TOKENS", "1000")
    monkeypatch.setenv("PIPELINE_TRIGGER_RETRY_BASE_S", "60")
    monkeypatch.setenv("PIPELINE_TRIGGER_RETRY_MAX_S", "600")
    return now


def _produced(instance, batch: str, tokens: int, ranges: dict):
    instance.report_runless_asset_event(
        dg.AssetMaterialization("token_blocks", partition=batch, metadata={"tokens": tokens, "offset_ranges": ranges})
    )


def _tick(instance, cursor=None):
    with dg.build_sensor_context(
        instance=instance,
        cursor=cursor,
        resources={"trigger": training_trigger(Settings()), "trainer": trainer_from_settings(Settings())},
    ) as ctx:
        return trigger.checkpoint_trigger_sensor(ctx)


def _event(instance, run, kind: DagsterEventType, at: float, **data):
    event = DagsterEvent(kind.value, job_name=run.job_name, **data)
    instance.report_dagster_event(event, run_id=run.run_id, timestamp=at)


def _triggered_run(instance, request: dg.RunRequest, at: float):
    """The run the daemon launches for `request`, started at `at`."""
    tags = {**request.tags, RUN_KEY_TAG: request.run_key, SENSOR_NAME_TAG: SENSOR}
    run = create_run_for_test(instance, job_name="__ASSET_JOB", tags=tags, remote_job_origin=ORIGIN)
    _event(instance, run, DagsterEventType.RUN_START, at)
    return run


def _trained(instance, run, at: float, steps: int, position: dict, stop_reason="data_exhausted"):
    meta = {"steps": steps, "stop_reason": stop_reason, "end_position": dg.MetadataValue.json(position)}
    mat = dg.AssetMaterialization("deepseek_checkpoint", metadata=meta)
    _event(instance, run, DagsterEventType.ASSET_MATERIALIZATION, at, event_specific_data=StepMaterializationData(mat))
    _event(instance, run, DagsterEventType.RUN_SUCCESS, at)


def test_a_run_that_trained_nothing_is_not_requested_again_until_new_data_arrives(clock):
    """A dry domain under `wait` (or data the estimate took for untrained): the run materializes 0 steps."""
    with dg.instance_for_test() as instance:
        _produced(instance, "b1", 1500, {"0": [0, 9]})
        first = _tick(instance)
        (request,) = first.run_requests
        time.sleep(0.01)
        run = _triggered_run(instance, request, time.time())
        _trained(instance, run, time.time(), steps=0, position={"0": {"offset": 0, "block": 0}})
        time.sleep(0.01)
        cursor = first.cursor
        for _ in range(3):
            clock.t += 30
            tick = _tick(instance, cursor)
            assert tick.run_requests == [], tick.run_requests
            assert "trained 0 steps" in tick.skip_reason.skip_message
            cursor = tick.cursor
        _produced(instance, "b2", 600, {"0": [10, 15]})  # new, but less than PIPELINE_MIN_NEW_TOKENS
        assert _tick(instance, cursor).run_requests == []
        _produced(instance, "b3", 600, {"0": [16, 21]})
        (again,) = _tick(instance, cursor).run_requests
        assert again.run_key != request.run_key


def test_data_that_arrived_while_the_futile_run_ran_counts_as_new(clock):
    with dg.instance_for_test() as instance:
        _produced(instance, "b1", 1500, {"0": [0, 9]})
        (request,) = _tick(instance).run_requests
        time.sleep(0.01)
        run = _triggered_run(instance, request, time.time())
        time.sleep(0.01)
        _produced(instance, "b2", 1200, {"0": [10, 19]})  # after the run started: it may not have seen it
        _trained(instance, run, clock.t, steps=0, position={"0": {"offset": 0, "block": 0}})
        assert len(_tick(instance).run_requests) == 1


def test_a_failed_run_is_requested_again_after_a_growing_backoff_and_not_before(clock):
    with dg.instance_for_test() as instance:
        _produced(instance, "b1", 1500, {"0": [0, 9]})
        tick = _tick(instance)
        keys = [tick.run_requests[0].run_key]
        for failures, delay in ((1, 60), (2, 120), (3, 240)):
            run = _triggered_run(instance, tick.run_requests[0], clock.t)
            _event(instance, run, DagsterEventType.RUN_FAILURE, clock.t + 1)
            clock.t += 1 + delay - 1
            early = _tick(instance, tick.cursor)
            assert early.run_requests == [], (failures, early.run_requests)
            assert f"{run.run_id} failed ({failures} in a row)" in early.skip_reason.skip_message
            assert "retrying in 1s" in early.skip_reason.skip_message
            state = TriggerCursor.from_cursor(early.cursor)  # the backoff lives in the cursor: a restart keeps it
            assert state.failures == failures and state.failed_run == run.run_id
            clock.t += 2
            tick = _tick(instance, early.cursor)
            (request,) = tick.run_requests
            assert request.run_key not in keys  # a new key: the daemon launches it
            keys.append(request.run_key)

        run = _triggered_run(instance, tick.run_requests[0], clock.t)
        _trained(instance, run, clock.t + 1, steps=3, position={"0": {"offset": 5, "block": 0}})
        after = _tick(instance, tick.cursor)
        assert TriggerCursor.from_cursor(after.cursor).failures == 0  # a success ends the streak


def test_the_backoff_doubles_and_is_capped():
    assert [retry_delay(n, base_s=60, max_s=600) for n in range(1, 7)] == [60, 120, 240, 480, 600, 600]
    assert retry_delay(200, base_s=60, max_s=3600) == 3600  # no overflow however long the streak


def test_a_triggered_run_carries_its_bound_and_the_leftover_backlog_is_requested_next(clock, monkeypatch):
    monkeypatch.setenv("PIPELINE_TRIGGER_MAX_STEPS", "7")
    with dg.instance_for_test() as instance:
        _produced(instance, "b1", 4000, {"0": [0, 19]})
        tick = _tick(instance)
        (request,) = tick.run_requests
        assert request.run_config == {"ops": {"deepseek_checkpoint": {"config": {"max_steps": 7}}}}
        run = _triggered_run(instance, request, clock.t)
        # the bound stopped it at offset 18 of 20: 400 tokens left, less than PIPELINE_MIN_NEW_TOKENS
        _trained(
            instance, run, clock.t + 1, steps=7, position={"0": {"offset": 18, "block": 0}}, stop_reason="max_steps"
        )
        (rest,) = _tick(instance, tick.cursor).run_requests
        assert rest.run_key != request.run_key


def test_a_run_that_ended_with_the_data_leaves_a_small_backlog_to_the_threshold(clock):
    with dg.instance_for_test() as instance:
        _produced(instance, "b1", 4000, {"0": [0, 19]})
        (request,) = _tick(instance).run_requests
        run = _triggered_run(instance, request, clock.t)
        _trained(instance, run, clock.t + 1, steps=9, position={"0": {"offset": 18, "block": 0}})
        assert "400 untrained tokens < 1000" in _tick(instance).skip_reason.skip_message


def test_the_bound_reaches_the_trainer_job_and_the_trainer_stops_at_it(clock, monkeypatch):
    from pipeline_project.defs.assets.checkpoint import deepseek_checkpoint
    from pipeline_project.defs.resources import build_resources
    from pipeline_project.defs.resources.trainer import TrainerResource

    jobs = []

    class CapturingTrainer(TrainerResource):
        def run(self, context, job):
            jobs.append(job)
            return dg.MaterializeResult(metadata={"steps": 0})

    monkeypatch.setenv("PIPELINE_TRIGGER_MAX_STEPS", "5")
    with dg.instance_for_test() as instance:
        _produced(instance, "b1", 4000, {"0": [0, 19]})
        (request,) = _tick(instance).run_requests
        resources = {**without_postgres(build_resources()), "trainer": CapturingTrainer(max_steps=50)}
        result = dg.materialize(
            [deepseek_checkpoint], resources=resources, instance=instance, run_config=request.run_config
        )
        assert result.success
    assert jobs[0].train.max_steps == 5  # the tighter of the run's bound and the resource's cap

    from pipeline_project.training.presets import build_model
    from pipeline_project.training.trainer import build_optimizer, seed_everything, train
    from pipeline_project_tests.training.helpers import SMALL_VOCAB, make_batches, tiny_config

    seed_everything(0)
    model = build_model("tiny", SMALL_VOCAB)
    cfg = tiny_config(max_steps=jobs[0].train.max_steps)
    trained = train(cfg, make_batches(20), model=model, optimizer=build_optimizer(model, cfg))
    assert trained.steps == 5 and trained.stop_reason == "max_steps"


def test_while_the_demo_holds_the_trigger_it_requests_nothing_and_the_hold_expires(clock):
    with dg.instance_for_test() as instance:
        _produced(instance, "b1", 1500, {"0": [0, 9]})
        hold_trigger(instance, "demo 20261206T000000", seconds=600, now=clock.t)
        tick = _tick(instance)
        assert tick.run_requests == [] and "held by demo 20261206T000000" in tick.skip_reason.skip_message
        clock.t += 601  # a demo that died without releasing it holds it no longer
        assert len(_tick(instance).run_requests) == 1
        hold_trigger(instance, "demo 2", seconds=600, now=clock.t)
        release_trigger(instance, "demo other")  # only its owner releases it
        assert _tick(instance).run_requests == []
        release_trigger(instance, "demo 2")
        assert len(_tick(instance).run_requests) == 1


def test_the_demo_preempts_the_triggered_runs_in_flight_and_no_other(clock):
    from pipeline_project.demo.runner import triggered_runs_in_the_way

    with dg.instance_for_test() as instance:
        _produced(instance, "b1", 1500, {"0": [0, 9]})
        (request,) = _tick(instance).run_requests
        queued = create_run_for_test(
            instance,
            job_name="__ASSET_JOB",
            tags={**request.tags, RUN_KEY_TAG: request.run_key, SENSOR_NAME_TAG: SENSOR},
            remote_job_origin=ORIGIN,
        )
        _event(instance, queued, DagsterEventType.RUN_ENQUEUED, clock.t)
        manual = create_run_for_test(
            instance, job_name="__ASSET_JOB", tags=dict(TRAINING_RUN_TAGS), remote_job_origin=ORIGIN
        )
        _event(instance, manual, DagsterEventType.RUN_ENQUEUED, clock.t)
        assert triggered_runs_in_the_way(instance) == [queued.run_id]
        _event(instance, queued, DagsterEventType.RUN_CANCELED, clock.t)
        assert triggered_runs_in_the_way(instance) == []
