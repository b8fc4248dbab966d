"""The local stack as one object: start, stop and inspect Kafka, S3, MLflow and Dagster together."""

from __future__ import annotations

import contextlib
import fcntl
import shutil
import subprocess
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from pipeline_project.settings import Settings
from pipeline_project.stack.config import DEFAULT_SERVICES, SERVICES, StackConfig
from pipeline_project.stack.dagster import DagsterService
from pipeline_project.stack.errors import StackError
from pipeline_project.stack.kafka.cluster import KafkaService
from pipeline_project.stack.mlflow import MlflowService
from pipeline_project.stack.postgres import PostgresService
from pipeline_project.stack.processes import ManagedProcess, stop_all
from pipeline_project.stack.prometheus import PrometheusService
from pipeline_project.stack.s3 import S3Service
from pipeline_project.stack.service import Service, ServiceStatus

START_ORDER = ("postgres", "s3", "mlflow", "kafka", "dagster", "prometheus")
STOP_ORDER = ("prometheus", "dagster", "mlflow", "kafka", "s3", "postgres")

Progress = Callable[[str], None]


def _noop(_: str) -> None:
    pass


def parse_services(services: str | Iterable[str] | None, default: Sequence[str] = DEFAULT_SERVICES) -> list[str]:
    if services is None:
        names = list(default)
    elif isinstance(services, str):
        names = [s.strip() for s in services.split(",") if s.strip()]
    else:
        names = list(services)
    unknown = [n for n in names if n not in SERVICES]
    if unknown:
        raise StackError(f"unknown service(s) {', '.join(unknown)}; choose from {', '.join(SERVICES)}")
    return names


class Stack:
    """The embedded local stack under one state directory.

    >>> stack = Stack()                      # ports and state dir from env / settings.py
    >>> stack.up(["kafka", "s3", "mlflow"])  # idempotent
    >>> stack.settings().kafka_bootstrap
    """

    def __init__(self, config: StackConfig | None = None, **overrides) -> None:
        self.config = config if config is not None else StackConfig(**overrides)
        self.services: dict[str, Service] = {
            "kafka": KafkaService(self.config),
            "s3": S3Service(self.config),
            "mlflow": MlflowService(self.config),
            "postgres": PostgresService(self.config),
            "dagster": DagsterService(self.config),
            "prometheus": PrometheusService(self.config),
        }

    @property
    def state_dir(self) -> Path:
        return self.config.state_dir

    def settings(self) -> Settings:
        return self.config.settings()

    def processes(self, services: Iterable[str] = SERVICES) -> list[ManagedProcess]:
        return [mp for name in services for mp in self.services[name].processes()]

    def process(self, name: str) -> ManagedProcess:
        for mp in self.processes():
            if mp.name == name:
                return mp
        names = ", ".join(mp.name for mp in self.processes())
        raise StackError(f"no stack process named {name!r}; choose from {names}")

    # -- inspect --------------------------------------------------------------------------------------------------
    def status(self, services: Iterable[str] = SERVICES) -> list[ServiceStatus]:
        return [s for name in services for s in self.services[name].status()]

    def is_healthy(self, services: Iterable[str] = DEFAULT_SERVICES) -> bool:
        return all(s.healthy for s in self.status(services))

    def logs(self, name: str, lines: int = 50) -> dict[str, list[str]]:
        """Last `lines` of each log of a service ("kafka") or one process ("kafka-2")."""
        procs = self.services[name].processes() if name in self.services else [self.process(name)]
        return {mp.name: mp.tail(lines) for mp in procs}

    # -- lifecycle -------------------------------------------------------------------------------------------------
    def up(
        self,
        services: Iterable[str] = DEFAULT_SERVICES,
        timeout: float = 180.0,
        progress: Progress = _noop,
    ) -> list[str]:
        """Start what is not running, wait until every chosen service is healthy. Returns the processes started."""
        with self._lock():
            return self._up(list(services), timeout, progress)

    @contextlib.contextmanager
    def _lock(self):
        # Two `up`s at once (two test sessions) would race for the same ports; the second waits for the first.
        self.state_dir.mkdir(parents=True, exist_ok=True)
        with open(self.state_dir / ".lock", "w") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _up(self, services: list[str], timeout: float, progress: Progress) -> list[str]:
        chosen = [n for n in START_ORDER if n in set(services)]
        to_start: dict[str, list[ManagedProcess]] = {}
        for name in chosen:
            missing = [mp for mp in self.services[name].processes() if not mp.is_running()]
            for mp in missing:
                mp.check_ports_free(self.config.host)
            if missing:
                to_start[name] = missing

        launched: dict[str, subprocess.Popen] = {}
        try:
            for name in chosen:
                if name not in to_start:
                    progress(f"{name}: already running")
                    continue
                progress(f"{name}: starting {', '.join(mp.name for mp in to_start[name])}")
                self.services[name].prepare()
                # Built again after prepare: what it made (the secure profile's credentials) is in their env.
                prepared = {mp.name: mp for mp in self.services[name].processes()}
                for mp in to_start[name]:
                    launched[mp.name] = prepared[mp.name].spawn()
            self._wait_healthy(chosen, launched, timeout, progress)
        except BaseException:
            # A failed `up` leaves nothing half-started behind; what ran before it keeps running.
            stop_all([self.process(n) for n in launched])
            raise
        return list(launched)

    def _wait_healthy(
        self, chosen: list[str], launched: dict[str, subprocess.Popen], timeout: float, progress: Progress
    ) -> None:
        deadline = time.monotonic() + timeout
        pending = list(chosen)
        while pending:
            for name, popen in launched.items():
                code = popen.poll()
                if code is not None:
                    mp = self.process(name)
                    last = next((line for line in reversed(mp.tail(40)) if line.strip()), "no output")
                    raise StackError(f"{name} exited with code {code} while starting ({mp.log_file}): {last.strip()}")
            for name in list(pending):
                statuses = self.services[name].status()
                if all(s.healthy for s in statuses):
                    self.services[name].after_healthy()
                    pending.remove(name)
                    progress(f"{name}: healthy")
            if not pending:
                return
            if time.monotonic() > deadline:
                down = [s for n in pending for s in self.services[n].status() if not s.healthy]
                names = ", ".join(f"{s.name} ({s.detail})" if s.detail else s.name for s in down)
                raise StackError(
                    f"not healthy after {timeout:.0f}s: {names}; see `pipeline-project stack logs <service>`"
                )
            time.sleep(0.5)

    def stop(self, process_names: Iterable[str]) -> list[str]:
        """Stop the named processes only (e.g. what one `up` returned)."""
        return stop_all([self.process(n) for n in process_names])

    def down(self, services: Iterable[str] = SERVICES, wipe: bool = False, progress: Progress = _noop) -> list[str]:
        """Stop the processes this stack started (pid files), optionally delete their data. Returns the names stopped."""
        with self._lock():
            return self._down(list(services), wipe, progress)

    def _down(self, services: list[str], wipe: bool, progress: Progress) -> list[str]:
        chosen = [n for n in STOP_ORDER if n in set(services)]
        stopped: list[str] = []
        for name in chosen:
            names = self.services[name].stop()
            if names:
                progress(f"{name}: stopped {', '.join(names)}")
            stopped.extend(names)
            if wipe:
                for path in self.services[name].data_dirs():
                    shutil.rmtree(path, ignore_errors=True)
                progress(f"{name}: data wiped")
        return stopped
