"""Where the stack keeps its state and which ports it binds: from settings.py (the environment), overridable in code."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from pipeline_project import settings as client_settings
from pipeline_project.settings import Settings

from .errors import StackError

REPO_ROOT = Path(__file__).resolve().parents[2]

SERVICES = ("kafka", "s3", "mlflow", "postgres", "dagster")
DEFAULT_SERVICES = ("kafka", "s3", "mlflow", "postgres")


def _ports_from_env(name: str, default: tuple[int, ...]) -> tuple[int, ...]:
    try:
        return client_settings.stack_ports(name, default)
    except ValueError as err:
        raise StackError(str(err)) from None


def _port_from_env(name: str, default: int) -> int:
    return _ports_from_env(name, (default,))[0]


def default_state_dir() -> Path:
    raw = client_settings.stack_state_dir()
    return Path(raw).expanduser().resolve() if raw else REPO_ROOT / ".state"


@dataclass(frozen=True)
class StackConfig:
    """Everything the local stack needs to know to start; defaults come from settings.py (env vars, then constants)."""

    state_dir: Path = field(default_factory=default_state_dir)
    kafka_ports: tuple[int, ...] = field(
        default_factory=lambda: _ports_from_env("PIPELINE_KAFKA_PORTS", client_settings.LOCAL_KAFKA_PORTS)
    )
    kafka_controller_ports: tuple[int, ...] = field(
        default_factory=lambda: _ports_from_env("PIPELINE_KAFKA_CONTROLLER_PORTS", (19192, 19193, 19194))
    )
    s3_port: int = field(default_factory=lambda: _port_from_env("PIPELINE_S3_PORT", client_settings.LOCAL_S3_PORT))
    mlflow_port: int = field(
        default_factory=lambda: _port_from_env("PIPELINE_MLFLOW_PORT", client_settings.LOCAL_MLFLOW_PORT)
    )
    dagster_port: int = field(
        default_factory=lambda: _port_from_env("PIPELINE_DAGSTER_PORT", client_settings.LOCAL_DAGSTER_PORT)
    )
    postgres_port: int = field(
        default_factory=lambda: _port_from_env("PIPELINE_POSTGRES_PORT", client_settings.LOCAL_POSTGRES_PORT)
    )
    host: str = "127.0.0.1"
    s3_access_key: str = client_settings.LOCAL_S3_ACCESS_KEY
    s3_secret_key: str = client_settings.LOCAL_S3_SECRET_KEY
    buckets: tuple[str, ...] = field(default_factory=lambda: tuple(Settings().buckets))
    mlflow_artifacts_bucket: str = field(default_factory=lambda: Settings().mlflow_artifacts_bucket)
    kafka_heap: str = "512m"
    s3_heap: str = "256m"
    repo_root: Path = REPO_ROOT

    def __post_init__(self) -> None:
        object.__setattr__(self, "state_dir", Path(self.state_dir).expanduser().resolve())
        if len(self.kafka_ports) != len(self.kafka_controller_ports):
            raise StackError(
                f"{len(self.kafka_ports)} Kafka broker ports but {len(self.kafka_controller_ports)} controller ports"
            )

    @property
    def kafka_bootstrap(self) -> str:
        return ",".join(f"{self.host}:{p}" for p in self.kafka_ports)

    @property
    def s3_endpoint(self) -> str:
        return f"http://{self.host}:{self.s3_port}"

    @property
    def mlflow_url(self) -> str:
        return f"http://{self.host}:{self.mlflow_port}"

    def postgres_url(self, database: str = "pipeline") -> str:
        user, password = client_settings.LOCAL_POSTGRES_USER, client_settings.LOCAL_POSTGRES_PASSWORD
        return f"postgresql://{user}:{password}@{self.host}:{self.postgres_port}/{database}"

    @property
    def dagster_url(self) -> str:
        return f"http://{self.host}:{self.dagster_port}"

    def settings(self) -> Settings:
        """Client-side settings pointing at this stack."""
        return Settings(
            kafka_bootstrap=self.kafka_bootstrap,
            s3_endpoint=self.s3_endpoint,
            s3_access_key=self.s3_access_key,
            s3_secret_key=self.s3_secret_key,
            mlflow_tracking_uri=self.mlflow_url,
            mlflow_artifacts_bucket=self.mlflow_artifacts_bucket,
            dagster_url=self.dagster_url,
            postgres_url=self.postgres_url(),
        )
