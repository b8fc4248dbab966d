"""Dagster's default run launcher, plus the run-worker health check that run monitoring needs on one host.

`DefaultRunLauncher` starts each run worker as a subprocess of the code server but cannot tell whether that
worker is still alive, so a run whose worker was killed would stay STARTED forever, holding its run slot.
The code server records the worker's pid in the run's first engine event ("Started process for run (pid: N)");
this launcher reads it back and checks the process on this machine. Run monitoring then marks a run whose
worker is gone as failed, and run retries launch it again. On Kubernetes, `K8sRunLauncher` does the same
for pods; this class is for the local stack, where the daemon, code server and workers share one host.
"""

from __future__ import annotations

import psutil
from dagster import DagsterEventType, DagsterRun, DefaultRunLauncher

# Private, for want of a public home in Dagster 1.13: the result type of `check_run_worker_health`, the hook
# RunLauncher (public) asks subclasses to implement. pipeline_project_tests/dagster_layer/test_run_launcher_contract.py
# fails when these names, their fields or the code server's pid event change.
from dagster._core.launcher import CheckRunHealthResult, WorkerStatus


class LocalProcessRunLauncher(DefaultRunLauncher):
    @property
    def supports_check_run_worker_health(self) -> bool:
        return True

    def _worker(self, run: DagsterRun) -> tuple[int, float] | None:
        """(pid, event timestamp) of the run's worker, from the code server's engine event."""
        records = self._instance.all_logs(run.run_id, of_type=DagsterEventType.ENGINE_EVENT)
        for entry in records[:50]:
            if "Started process for run" not in (entry.message or "") or entry.dagster_event is None:
                continue
            metadata = getattr(entry.dagster_event.event_specific_data, "metadata", None) or {}
            pid = getattr(metadata.get("pid"), "value", None)  # EngineEventData.in_process: text metadata
            if pid is not None and str(pid).isdigit():
                return int(pid), entry.timestamp
        return None

    def check_run_worker_health(self, run: DagsterRun) -> CheckRunHealthResult:
        worker = self._worker(run)
        if worker is None:
            # no pid recorded (yet): nothing to judge by; start_timeout_seconds still catches a stuck start
            return CheckRunHealthResult(WorkerStatus.RUNNING, "worker pid not recorded yet", transient=True)
        pid, started = worker
        try:
            proc = psutil.Process(pid)
            alive = proc.status() != psutil.STATUS_ZOMBIE and proc.create_time() <= started + 5
        except psutil.NoSuchProcess:
            alive = False
        if alive:
            return CheckRunHealthResult(WorkerStatus.RUNNING, run_worker_id=str(pid))
        return CheckRunHealthResult(WorkerStatus.NOT_FOUND, f"run worker process {pid} is gone", run_worker_id=str(pid))
