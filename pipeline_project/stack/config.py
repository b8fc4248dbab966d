"""Where the stack keeps its state and which ports it binds: from settings.py (the environment), overridable in code."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pipeline_project import settings as client_settings
from pipeline_project.settings import Settings
from pipeline_project.stack.discovery import default_stack_state_dir
from pipeline_project.stack.errors import StackError
from pipeline_project.stack.security import (
    CLIENT_USER,
    DEFAULT_SASL_MECHANISM,
    PLAINTEXT,
    SASL_SSL,
    KafkaSecurity,
    check_mechanism,
    check_profile,
    recorded_profile,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
# The cleaning config the stack's Dagster runs with unless PIPELINE_CLEANING_CONFIG says otherwise (HumanEval
# decontamination on): `StackConfig.dagster_corpus_env`
DEEPSEEK_CLEANING_CONFIG = Path("deploy/local/cleaning-deepseek.json")

# The Settings fields of Kafka security, and the variables clients read them (and the password) from
KAFKA_SECURITY_FIELDS = ("kafka_security_protocol", "kafka_sasl_mechanism", "kafka_sasl_username",
                         "kafka_ssl_ca_location")  # fmt: skip
KAFKA_SECURITY_ENV = ("KAFKA_SECURITY_PROTOCOL", "KAFKA_SASL_MECHANISM", "KAFKA_SASL_USERNAME",
                      client_settings.KAFKA_SASL_PASSWORD_ENV, "KAFKA_SSL_CA_LOCATION")  # fmt: skip

SERVICES = ("kafka", "s3", "mlflow", "postgres", "dagster", "prometheus")  # prometheus: on demand, with its Pushgateway
DEFAULT_SERVICES = ("kafka", "s3", "mlflow", "postgres")


def _ports_from_env(name: str, default: tuple[int, ...]) -> tuple[int, ...]:
    try:
        return client_settings.stack_ports(name, default)
    except ValueError as err:
        raise StackError(str(err)) from None


def _port_from_env(name: str, default: int) -> int:
    return _ports_from_env(name, (default,))[0]


def default_state_dir() -> Path:
    return default_stack_state_dir()


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
    addresses: Mapping[str, str] = field(default_factory=dict, hash=False)
    """Per-role address where a role is not on `host`: "kafka-1".."kafka-N", "s3", "mlflow", "postgres", "dagster",
    "prometheus" (the cluster harness puts each on its own network namespace); empty for the local stack."""
    kafka_nodes: tuple[int, ...] | None = None
    """The broker node ids this state dir runs (one per cluster host); None: all of them."""
    s3_access_key: str = client_settings.LOCAL_S3_ACCESS_KEY
    s3_secret_key: str = client_settings.LOCAL_S3_SECRET_KEY
    buckets: tuple[str, ...] = field(default_factory=lambda: tuple(Settings().buckets))
    mlflow_artifacts_bucket: str = field(default_factory=lambda: Settings().mlflow_artifacts_bucket)
    trainer_metrics_port: int = field(default_factory=lambda: Settings().metrics_port)
    """The first trainer rank's Prometheus port (`PIPELINE_METRICS_PORT`); 0: trainers are not scraped."""
    kafka_security: str | None = field(default_factory=client_settings.stack_kafka_security)
    """"plaintext" or "sasl_ssl" (`up --secure`); None: what the state dir's Kafka storage was formatted for."""
    kafka_sasl_mechanism: str = DEFAULT_SASL_MECHANISM
    """The mechanism clients are told to use; the SASL_SSL listener accepts SCRAM-SHA-512/256 and PLAIN."""
    kafka_heap: str = "512m"
    s3_heap: str = "256m"
    s3_backend: str = "filesystem"
    """s3proxy's store: "filesystem" (durable under the state dir; a listing page scans the whole folder, so it
    slows to ~20 keys/s at 10^5 objects) or "transient" (in memory, gone at stop; for benchmarks at that size)."""
    repo_root: Path = REPO_ROOT
    prometheus_port: int = field(
        default_factory=lambda: _port_from_env("PIPELINE_PROMETHEUS_PORT", client_settings.LOCAL_PROMETHEUS_PORT)
    )
    pushgateway_port: int = field(
        default_factory=lambda: _port_from_env("PIPELINE_PUSHGATEWAY_PORT", client_settings.LOCAL_PUSHGATEWAY_PORT)
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "state_dir", Path(self.state_dir).expanduser().resolve())
        if len(self.kafka_ports) != len(self.kafka_controller_ports):
            raise StackError(
                f"{len(self.kafka_ports)} Kafka broker ports but {len(self.kafka_controller_ports)} controller ports"
            )
        check_profile(self.kafka_security, "PIPELINE_KAFKA_SECURITY")
        check_mechanism(self.kafka_sasl_mechanism, "kafka_sasl_mechanism")

    def address(self, role: str) -> str:
        """Where a role ("s3", "kafka-2", ...) binds and is reached: its own address if given, else `host`."""
        return self.addresses.get(role, self.host)

    @property
    def kafka_hosts(self) -> tuple[str, ...]:
        return tuple(self.address(f"kafka-{n}") for n in range(1, len(self.kafka_ports) + 1))

    @property
    def kafka_bootstrap(self) -> str:
        return ",".join(f"{h}:{p}" for h, p in zip(self.kafka_hosts, self.kafka_ports, strict=True))

    @property
    def kafka_profile(self) -> str:
        """The Kafka security profile in force: as configured, else as formatted, else plaintext."""
        return self.kafka_security or recorded_profile(self.state_dir / "kafka") or PLAINTEXT

    @property
    def kafka_secure(self) -> KafkaSecurity | None:
        """The sasl_ssl profile's files (CA, passwords, client config); None for plaintext."""
        return KafkaSecurity(self.state_dir / "kafka") if self.kafka_profile == SASL_SSL else None

    @property
    def s3_endpoint(self) -> str:
        return f"http://{self.address('s3')}:{self.s3_port}"

    @property
    def mlflow_url(self) -> str:
        return f"http://{self.address('mlflow')}:{self.mlflow_port}"

    def postgres_url(self, database: str = "pipeline") -> str:
        user, password = client_settings.LOCAL_POSTGRES_USER, client_settings.LOCAL_POSTGRES_PASSWORD
        return f"postgresql://{user}:{password}@{self.address('postgres')}:{self.postgres_port}/{database}"

    @property
    def dagster_url(self) -> str:
        return f"http://{self.address('dagster')}:{self.dagster_port}"

    def _kafka_settings(self) -> dict[str, str | None]:
        secure = self.kafka_secure
        if secure is None:
            return dict.fromkeys(KAFKA_SECURITY_FIELDS)  # plaintext, whatever this process's environment says
        return {
            "kafka_security_protocol": "SASL_SSL",
            "kafka_sasl_mechanism": self.kafka_sasl_mechanism,
            "kafka_sasl_username": CLIENT_USER,
            "kafka_ssl_ca_location": str(secure.ca_location),
        }

    def settings(self) -> Settings:
        """Client-side settings pointing at this stack. The Kafka password is not among them (secrets never are):
        clients read it from KAFKA_SASL_PASSWORD, which `client_env()` carries."""
        return Settings(
            kafka_bootstrap=self.kafka_bootstrap,
            **self._kafka_settings(),
            s3_endpoint=self.s3_endpoint,
            s3_access_key=self.s3_access_key,
            s3_secret_key=self.s3_secret_key,
            mlflow_tracking_uri=self.mlflow_url,
            mlflow_artifacts_bucket=self.mlflow_artifacts_bucket,
            dagster_url=self.dagster_url,
            postgres_url=self.postgres_url(),
        )

    def dagster_corpus_env(self) -> dict[str, str]:
        """What the stack's Dagster (code servers, runs) gets on top of `client_env()`: the DeepSeek-style corpus
        settings, FIM for code and HumanEval decontamination (`settings.stack_corpus_env`), which the library and
        the deployments leave off."""
        return client_settings.stack_corpus_env(self.repo_root / DEEPSEEK_CLEANING_CONFIG)

    def client_env(self) -> dict[str, str]:
        """The environment every process the stack launches gets (and `stack env` prints): the clients' settings
        for this stack, its S3 keys and Kafka password included. Empty values clear what the caller had exported."""
        env = {
            "PIPELINE_KAFKA_BOOTSTRAP": self.kafka_bootstrap,
            "PIPELINE_S3_ENDPOINT": self.s3_endpoint,
            client_settings.AWS_ACCESS_KEY_ENV: self.s3_access_key,
            client_settings.AWS_SECRET_KEY_ENV: self.s3_secret_key,
            "MLFLOW_TRACKING_URI": self.mlflow_url,
            "MLFLOW_S3_ENDPOINT_URL": self.s3_endpoint,
            "PIPELINE_DAGSTER_URL": self.dagster_url,
            "PIPELINE_POSTGRES_URL": self.postgres_url(),
        }
        secure = self.kafka_secure
        if secure is None:
            return {**env, **dict.fromkeys(KAFKA_SECURITY_ENV, ""), "KAFKA_SECURITY_PROTOCOL": "PLAINTEXT"}
        return {**env, **secure.client_env(self.kafka_sasl_mechanism)}
