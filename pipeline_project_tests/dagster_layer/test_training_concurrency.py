"""One training at a time, ingest never behind it: the instance configs, the run tags, the pool, the trigger
sensor's in-flight check and the asset's own guard. No services: a test instance and the YAML files."""

from pathlib import Path

import dagster as dg
import pytest
import yaml
from dagster._core.events import DagsterEvent, DagsterEventType
from dagster._core.remote_origin import RegisteredCodeLocationOrigin, RemoteRepositoryOrigin
from dagster._core.test_utils import create_run_for_test

from pipeline_project.definitions import defs
from pipeline_project.defs.assets.checkpoint import refuse_if_another_run_trains
from pipeline_project.defs.partitions import INGEST_RUN_TAGS, TRAINING_POOL, TRAINING_RUN_TAGS
from pipeline_project.defs.resources import training_trigger
from pipeline_project.defs.resources.trainer import trainer_from_settings
from pipeline_project.defs.sensors.checkpoint_trigger import checkpoint_trigger_sensor
from pipeline_project.settings import Settings
from pipeline_project.stack.dagster import DAGSTER_YAML

REPO = Path(__file__).resolve().parents[2]
DEPLOY_YAML = REPO / "deploy" / "dagster" / "dagster.yaml"
# queued runs need a job origin; a registered (not loadable) one is enough for the run storage
ORIGIN = RemoteRepositoryOrigin(RegisteredCodeLocationOrigin("tests"), "__repository__").get_job_origin("__ASSET_JOB")


def _instance_from(config: dict, home: Path) -> dg.DagsterInstance:
    home.mkdir(parents=True, exist_ok=True)
    (home / "dagster.yaml").write_text(yaml.safe_dump(config))
    return dg.DagsterInstance.from_config(str(home))


def _stack_config(home: Path) -> dict:
    config = yaml.safe_load(DAGSTER_YAML.format(home=home, postgres_url="postgresql+psycopg2://u:p@db:5432/dagster"))
    assert "postgres" in config["storage"]  # the stack keeps Dagster's storage in its PostgreSQL
    assert config["run_launcher"]["class"] == "LocalProcessRunLauncher"  # run monitoring can check workers
    return {**config, "storage": {"sqlite": {"base_dir": str(home / "storage")}}}  # the rest, as the stack writes it


def _deploy_config(home: Path) -> dict:
    config = yaml.safe_load(DEPLOY_YAML.read_text())
    assert "postgres" in config["storage"]  # a deployment keeps Dagster's storage in PostgreSQL
    return {**config, "storage": {"sqlite": {"base_dir": str(home / "storage")}}}  # the rest, as shipped


@pytest.mark.parametrize("which", ["stack", "deploy"])
def test_instance_config_runs_one_training_and_gives_ingest_its_own_slots(which, tmp_path):
    config = (_stack_config if which == "stack" else _deploy_config)(tmp_path)
    instance = _instance_from(config, tmp_path / "home")
    try:
        queue = instance.get_concurrency_config().run_queue_config
        limits = {(t["key"], t.get("value")): t["limit"] for t in queue.tag_concurrency_limits}
        training = limits[("pipeline/kind", TRAINING_RUN_TAGS["pipeline/kind"])]
        ingest = limits[("pipeline/kind", INGEST_RUN_TAGS["pipeline/kind"])]
        assert training == 1 and ingest >= 1
        assert queue.max_concurrent_runs >= training + ingest + 1  # ingest never waits on a training slot
        assert instance.global_op_concurrency_default_limit == 1  # pools `training` and `dedup_index`
        assert instance.run_retries_enabled and instance.run_retries_max_retries >= 1
        assert instance.run_monitoring_enabled
        assert instance.run_monitoring_max_resume_run_attempts == 0  # valid with every run launcher
        if which == "stack":  # the local launcher tells run monitoring whether a run's worker is alive
            assert instance.run_launcher.supports_check_run_worker_health
    finally:
        instance.dispose()


def test_the_deploy_config_validates_with_its_postgres_storage(tmp_path, monkeypatch):
    from dagster._core.instance.config import dagster_instance_config

    for name, value in {"HOST": "db", "PORT": "5432", "DB": "dagster", "USERNAME": "u", "PASSWORD": "p"}.items():
        monkeypatch.setenv(f"DAGSTER_PG_{name}", value)
    (tmp_path / "dagster.yaml").write_text(DEPLOY_YAML.read_text())
    config, _ = dagster_instance_config(str(tmp_path))
    assert config["storage"]["postgres"]["postgres_db"]["password"] == {"env": "DAGSTER_PG_PASSWORD"}


def test_training_is_pooled_and_tagged_and_ingest_automation_is_tagged():
    assert defs.resolve_assets_def("deepseek_checkpoint").op.pool == TRAINING_POOL
    assert defs.resolve_job_def("train_checkpoint").tags.get("pipeline/kind") == "training"
    (automation,) = [s for s in defs.sensors if s.name == "ingest_automation_sensor"]
    assert INGEST_RUN_TAGS.items() <= automation.run_tags.items()


def _run(instance, *, tags=None, asset_selection=None, events=()):
    run = create_run_for_test(
        instance, job_name="__ASSET_JOB", tags=tags, asset_selection=asset_selection, remote_job_origin=ORIGIN
    )
    for event in events:
        instance.report_dagster_event(DagsterEvent(event.value, job_name=run.job_name), run_id=run.run_id)
    return run


def _enough_untrained_tokens(instance):
    instance.report_runless_asset_event(
        dg.AssetMaterialization(
            "token_blocks", partition="b1", metadata={"tokens": 5000, "offset_ranges": {"0": [0, 9]}}
        )
    )


def _tick(instance):
    with dg.build_sensor_context(
        instance=instance,
        resources={"trigger": training_trigger(Settings()), "trainer": trainer_from_settings(Settings())},
    ) as ctx:
        return checkpoint_trigger_sensor(ctx)


@pytest.mark.parametrize(
    "events", [[DagsterEventType.RUN_ENQUEUED], [DagsterEventType.RUN_START]], ids=["queued", "started"]
)
def test_the_trigger_requests_no_training_while_one_is_queued_or_running(events, monkeypatch):
    monkeypatch.setenv("PIPELINE_MIN_NEW_TOKENS", "1000")
    monkeypatch.setenv("PIPELINE_TRIGGER_RETRY_BASE_S", "0")  # no backoff after the failure (test_trigger_outcomes)
    with dg.instance_for_test() as instance:
        _enough_untrained_tokens(instance)
        busy = _run(instance, tags=TRAINING_RUN_TAGS, events=events)
        tick = _tick(instance)
        assert tick.run_requests == [] and busy.run_id in tick.skip_reason.skip_message

        instance.report_dagster_event(
            DagsterEvent(DagsterEventType.RUN_FAILURE.value, job_name=busy.job_name), run_id=busy.run_id
        )
        (request,) = _tick(instance).run_requests
        assert TRAINING_RUN_TAGS.items() <= request.tags.items()  # counted by the instance's training limit


def test_an_untagged_run_of_the_checkpoint_counts_as_training_too(monkeypatch):
    monkeypatch.setenv("PIPELINE_MIN_NEW_TOKENS", "1000")
    with dg.instance_for_test() as instance:
        _enough_untrained_tokens(instance)
        _run(instance, tags=INGEST_RUN_TAGS, events=[DagsterEventType.RUN_START])
        assert len(_tick(instance).run_requests) == 1  # an ingest run in flight does not hold training back
        _run(instance, asset_selection={dg.AssetKey("deepseek_checkpoint")}, events=[DagsterEventType.RUN_START])
        assert _tick(instance).run_requests == []


def test_the_asset_refuses_to_train_while_an_older_training_run_executes():
    with dg.instance_for_test() as instance:
        older = _run(instance, tags=TRAINING_RUN_TAGS, events=[DagsterEventType.RUN_START])
        mine = _run(instance, tags=TRAINING_RUN_TAGS, events=[DagsterEventType.RUN_START])
        with pytest.raises(dg.Failure, match=older.run_id):
            refuse_if_another_run_trains(instance, mine.run_id)
        refuse_if_another_run_trains(instance, older.run_id)  # the older one goes on: exactly one trains

        instance.report_dagster_event(
            DagsterEvent(DagsterEventType.RUN_SUCCESS.value, job_name=older.job_name), run_id=older.run_id
        )
        refuse_if_another_run_trains(instance, mine.run_id)


def test_the_stack_launcher_reads_the_worker_pid_from_the_run_and_sees_it_die(tmp_path):
    """Run monitoring asks the launcher whether a run's worker lives; it finds the pid in the run's own engine
    event (as the code server writes it) and judges the process on this host."""
    import subprocess
    import sys

    from dagster._core.events import EngineEventData
    from dagster._core.launcher import WorkerStatus

    instance = _instance_from(_stack_config(tmp_path), tmp_path / "home")
    try:
        launcher = instance.run_launcher
        run = create_run_for_test(instance, job_name="__ASSET_JOB")
        assert launcher.check_run_worker_health(run).transient  # no pid recorded yet: nothing to judge by
        worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        try:
            instance.report_engine_event(
                f"Started process for run (pid: {worker.pid}).", run, EngineEventData.in_process(worker.pid)
            )
            assert launcher.check_run_worker_health(run).status == WorkerStatus.RUNNING
        finally:
            worker.kill()
            worker.wait()
        health = launcher.check_run_worker_health(run)
        assert health.status == WorkerStatus.NOT_FOUND and str(worker.pid) in health.msg
    finally:
        instance.dispose()
