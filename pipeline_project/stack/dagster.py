"""Dagster webserver + daemon over an instance (DAGSTER_HOME) kept under the state directory."""

from __future__ import annotations

import json
import sys
import urllib.request

from pipeline_project.common.postgres import with_timeouts
from pipeline_project.stack.processes import ManagedProcess, http_get
from pipeline_project.stack.service import Service, ServiceStatus

DAGSTER_YAML = """\
telemetry:
  enabled: false
# Run, event-log and schedule storage in the stack's PostgreSQL (dagster-postgres), like deploy/dagster/dagster.yaml.
storage:
  postgres:
    postgres_url: "{postgres_url}"
# DefaultRunLauncher plus a worker health check, so run monitoring catches a run whose worker died.
run_launcher:
  module: pipeline_project.defs.run_launcher
  class: LocalProcessRunLauncher
compute_logs:
  module: dagster._core.storage.local_compute_log_manager
  class: LocalComputeLogManager
  config:
    base_dir: {home}/compute_logs
local_artifact_storage:
  module: dagster._core.storage.root
  class: LocalArtifactStorage
  config:
    base_dir: {home}/artifacts
run_coordinator:
  module: dagster._core.run_coordinator
  class: QueuedRunCoordinator
  config:
    dequeue_interval_seconds: 1
# Kinds of work get limits of their own (keys as in dagster 1.13's `_core/instance/config.py`): at most one
# training run; ingest runs have their own limit, and max_concurrent_runs leaves room for both, so ingest
# never waits behind training. Runs carry `pipeline/kind` (sensors, the train_checkpoint job, the ingest
# automation sensor). Same policy as deploy/dagster/dagster.yaml, sized for a laptop.
concurrency:
  runs:
    max_concurrent_runs: 6
    tag_concurrency_limits:
      - key: pipeline/kind
        value: training
        limit: 1
      - key: pipeline/kind
        value: ingest
        limit: 3
  pools:
    # every pool's limit: `training` (deepseek_checkpoint: one training step at a time); cleaned_shards needs
    # no pool, the dedup index in PostgreSQL decides first-writer-wins
    default_limit: 1
    granularity: op
# A run whose steps still fail after their retry policy is launched again, up to max_retries times.
run_retries:
  enabled: true
  max_retries: 3
# Fails runs stuck starting or canceling and runs whose worker died (LocalProcessRunLauncher checks the pid),
# so their run slot frees and run_retries launches them again; frees the pool slots of runs that ended.
run_monitoring:
  enabled: true
  start_timeout_seconds: 180
  cancel_timeout_seconds: 180
  max_resume_run_attempts: 0
  poll_interval_seconds: 15
  free_slots_after_run_end_seconds: 60
"""

DAEMON_HEALTH_QUERY = "{ instance { daemonHealth { allDaemonStatuses { daemonType healthy required } } } }"
LOCATIONS_QUERY = (
    "{ workspaceOrError { ... on Workspace { locationEntries { name loadStatus "
    "locationOrLoadError { __typename ... on PythonError { message } } } } } }"
)


class DagsterService(Service):
    name = "dagster"

    @property
    def home(self):
        return self.dir / "home"

    @property
    def workspace(self):
        return self.config.repo_root / "workspace.yaml"

    def _env(self) -> dict[str, str]:
        # The code server, runs and the trainer they launch find the stack through these (S3 endpoint and keys,
        # Kafka's security profile and password, ...): `Settings()` has no local S3 default of its own. The corpus
        # settings (FIM, decontamination) are read when the code location loads: a running Dagster keeps its own.
        return {"DAGSTER_HOME": str(self.home), **self.config.client_env(), **self.config.dagster_corpus_env()}

    def processes(self) -> list[ManagedProcess]:
        cfg = self.config
        webserver = ManagedProcess(
            name="dagster-webserver",
            cmd=(
                sys.executable,
                "-m",
                "dagster_webserver",
                "-w",
                str(self.workspace),
                "-h",
                cfg.address("dagster"),
                "-p",
                str(cfg.dagster_port),
            ),
            pid_file=self.dir / "webserver.pid",
            log_file=self.dir / "webserver.log",
            ports=(cfg.dagster_port,),
            env=self._env(),
            cwd=cfg.repo_root,
            stop_timeout=20.0,
        )
        daemon = ManagedProcess(
            name="dagster-daemon",
            cmd=(sys.executable, "-m", "dagster._daemon", "run", "-w", str(self.workspace)),
            pid_file=self.dir / "daemon.pid",
            log_file=self.dir / "daemon.log",
            env=self._env(),
            cwd=cfg.repo_root,
            stop_timeout=20.0,
        )
        return [webserver, daemon]

    def prepare(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        # SQLAlchemy 2.1 would drive a bare postgresql:// URL with psycopg 3; dagster-postgres needs psycopg2
        url = self.config.postgres_url("dagster").replace("postgresql://", "postgresql+psycopg2://", 1)
        url = with_timeouts(url)  # a partitioned PostgreSQL host fails a query instead of wedging it
        instance_yaml = DAGSTER_YAML.format(home=self.home, postgres_url=url)
        (self.home / "dagster.yaml").write_text(instance_yaml)

    def _graphql(self, query: str) -> dict | None:
        request = urllib.request.Request(
            self.config.dagster_url + "/graphql",
            data=json.dumps({"query": query}).encode(),
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=5) as resp:
                return json.loads(resp.read())["data"]
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def daemon_health(self) -> dict[str, bool] | None:
        data = self._graphql(DAEMON_HEALTH_QUERY)
        try:
            statuses = data["instance"]["daemonHealth"]["allDaemonStatuses"]
        except (KeyError, TypeError):
            return None
        return {s["daemonType"]: s["healthy"] for s in statuses if s["required"]}

    def code_locations(self) -> dict[str, str]:
        """Code location name -> "loaded", "loading" or the first line of its load error."""
        data = self._graphql(LOCATIONS_QUERY)
        try:
            entries = data["workspaceOrError"]["locationEntries"]
        except (KeyError, TypeError):
            return {}
        result = {}
        for entry in entries:
            loaded = entry.get("locationOrLoadError") or {}
            if loaded.get("__typename") == "PythonError":
                result[entry["name"]] = "error: " + loaded["message"].strip().splitlines()[0][:160]
            else:
                result[entry["name"]] = entry["loadStatus"].lower()
        return result

    def status(self) -> list[ServiceStatus]:
        webserver, daemon = self.processes()
        answer = http_get(self.config.dagster_url + "/server_info")
        web_ok = answer is not None and answer[0] == 200
        daemons = self.daemon_health() if web_ok else None
        daemon_ok = bool(daemons) and all(daemons.values())
        unhealthy = sorted(k for k, v in (daemons or {}).items() if not v)
        return [
            ServiceStatus(
                name="dagster-webserver",
                service=self.name,
                healthy=web_ok,
                url=self.config.dagster_url,
                pid=webserver.pid,
                detail="; ".join(f"{k}: {v}" for k, v in self.code_locations().items()) if web_ok else "",
            ),
            ServiceStatus(
                name="dagster-daemon",
                service=self.name,
                healthy=daemon_ok,
                url=self.config.dagster_url + "/deployment/daemons",
                pid=daemon.pid,
                detail=(
                    f"unhealthy: {', '.join(unhealthy)}" if unhealthy else f"{len(daemons or {})} daemons heartbeating"
                ),
            ),
        ]
