"""What every stack service looks like to `Stack`: processes to start, a preparation step, and a health probe."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass

from pipeline_project.stack.config import StackConfig
from pipeline_project.stack.processes import ManagedProcess, stop_all


@dataclass(frozen=True)
class ServiceStatus:
    """Health of one process of the stack (a Kafka broker, s3proxy, the MLflow server, ...)."""

    name: str
    service: str
    healthy: bool
    url: str
    pid: int | None = None
    detail: str = ""

    @property
    def managed(self) -> bool:
        """Started by this stack (our pid file names a live process)."""
        return self.pid is not None

    def to_dict(self) -> dict:
        return {**asdict(self), "managed": self.managed}


class Service(ABC):
    name: str

    def __init__(self, config: StackConfig) -> None:
        self.config = config
        self.dir = config.state_dir / self.name

    @abstractmethod
    def processes(self) -> list[ManagedProcess]: ...

    def stop(self) -> list[str]:
        """Stop this service's processes that the stack started; returns their names."""
        return stop_all(self.processes())

    def prepare(self) -> None:
        """Write config files and initialise storage before any process starts; safe to call again."""

    @abstractmethod
    def status(self) -> list[ServiceStatus]: ...

    def is_healthy(self) -> bool:
        return all(s.healthy for s in self.status())

    def after_healthy(self) -> None:
        """One-off setup once the service answers (create buckets, ...); idempotent."""

    def data_dirs(self) -> list:
        """What `down --wipe` deletes."""
        return [self.dir]
