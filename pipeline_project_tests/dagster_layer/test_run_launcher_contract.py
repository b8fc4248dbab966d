"""What LocalProcessRunLauncher (pipeline_project/defs/run_launcher.py) takes from Dagster beyond its public API:
the health-check result types, the launcher's instance, and the engine event in which the code server records the
run worker's pid. Each assertion fails when a Dagster upgrade changes one of them, before run monitoring silently
stops finding dead workers."""

from __future__ import annotations

import inspect

import dagster._grpc.impl as code_server_impl
from dagster import DefaultRunLauncher
from dagster._core.events import EngineEventData
from dagster._core.launcher import CheckRunHealthResult, WorkerStatus

from pipeline_project.defs.run_launcher import LocalProcessRunLauncher


def test_the_health_check_types_keep_their_names_and_fields():
    assert CheckRunHealthResult._fields == ("status", "msg", "transient", "run_worker_id")
    assert {WorkerStatus.RUNNING, WorkerStatus.NOT_FOUND} <= set(WorkerStatus)


def test_the_launcher_overrides_hooks_that_dagster_calls():
    for hook in ("supports_check_run_worker_health", "check_run_worker_health"):
        assert hook in vars(LocalProcessRunLauncher)
        assert hasattr(DefaultRunLauncher, hook), f"Dagster no longer has RunLauncher.{hook}"
    assert isinstance(inspect.getattr_static(DefaultRunLauncher, "_instance"), property)


def test_the_code_server_still_records_the_worker_pid_as_the_launcher_reads_it():
    source = inspect.getsource(code_server_impl)
    assert 'f"Started process for run (pid: {pid}).",' in source
    assert "EngineEventData.in_process(pid)" in source
    assert EngineEventData.in_process(4321).metadata["pid"].value == "4321"
