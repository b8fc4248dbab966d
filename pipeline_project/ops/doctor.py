"""`pipeline-project doctor`: is every service the pipeline needs reachable and set up as it expects?

Kafka (brokers, the token topic's layout and retention, ACLs when secured), S3 (credentials, buckets), MLflow,
Dagster and PostgreSQL. Each check gives one `Check` (name, ok, detail, hint: how to fix it); a failing check never
raises. Plain Python: the CLI hands in `Settings`, the topic layout it expects and the secrets from the environment.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from pipeline_project.common.errors import describe
from pipeline_project.settings import Settings, make_s3_client
from pipeline_project.stack.processes import http_get
from pipeline_project.streaming.topic import TopicSpec

STACK_HINT = "local stack: `pipeline-project stack up`"


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    hint: str = ""

    def line(self) -> str:
        mark = "ok  " if self.ok else "FAIL"
        return f"{mark} {self.name}: {self.detail}" + ("" if self.ok or not self.hint else f"  -> {self.hint}")


def _error(exc: BaseException) -> str:
    return describe(exc, limit=200)


# -- Kafka -------------------------------------------------------------------------------------------------------
def check_kafka(
    settings: Settings, spec: TopicSpec, sasl_password: str | None = None, timeout_s: float = 5.0
) -> list[Check]:
    from pipeline_project.streaming.kafka.client import KafkaSettings

    hint = f"start Kafka ({STACK_HINT}) or set PIPELINE_KAFKA_BOOTSTRAP / KAFKA_SECURITY_PROTOCOL"
    try:
        kafka = KafkaSettings.from_settings(settings, sasl_password=sasl_password)
        admin = kafka.make_admin()
        meta = admin.list_topics(timeout=timeout_s)
    except Exception as exc:  # noqa: BLE001 - any failure to reach the brokers is the finding
        return [Check("kafka.brokers", False, f"{settings.kafka_bootstrap}: {_error(exc)}", hint)]
    brokers = len(meta.brokers)
    checks = [
        Check(
            "kafka.brokers",
            brokers >= spec.replication_factor,
            f"{brokers} broker(s) at {settings.kafka_bootstrap}",
            f"the topic needs {spec.replication_factor} brokers (replication factor): start the missing ones",
        )
    ]
    checks += _topic_checks(admin, meta, spec, timeout_s)
    checks.append(_acl_check(admin, kafka, spec.name, timeout_s))
    return checks


def _topic_checks(admin: Any, meta: Any, spec: TopicSpec, timeout_s: float) -> list[Check]:
    from confluent_kafka.admin import ConfigResource

    from pipeline_project.streaming.kafka.topics import MESSAGE_BYTES_KEY, config_mismatches, partitions_ok

    name = spec.name
    topic = meta.topics.get(name)
    if topic is None or topic.error is not None:
        return [Check("kafka.topic", True, f"{name}: not created yet (the first token_blocks materialization does)")]
    partitions = len(topic.partitions)
    replicas = min((len(p.replicas) for p in topic.partitions.values()), default=0)
    layout_ok = partitions_ok(partitions, spec.partitions) and replicas == spec.replication_factor
    checks = [
        Check(
            "kafka.topic",
            layout_ok,
            f"{name}: {partitions} partitions, replication factor {replicas} "
            f"(expected at least {spec.partitions} partitions, replication factor {spec.replication_factor})",
            f"partitions can only grow (kafka-topics --alter --topic {name} --partitions {spec.partitions}); "
            "another replication factor needs a partition reassignment, or another PIPELINE_TOPIC",
        )
    ]
    try:
        resource = ConfigResource(ConfigResource.Type.TOPIC, name)
        entries = admin.describe_configs([resource], request_timeout=timeout_s)[resource].result(timeout=timeout_s)
        config = {k: e.value for k, e in entries.items()}
    except Exception as exc:  # noqa: BLE001
        return [*checks, Check("kafka.topic_config", False, f"{name}: {_error(exc)}", "check the client's permissions")]
    wanted = {**spec.topic_config(), "min.insync.replicas": spec.min_insync_replicas}
    wrong = config_mismatches(wanted, config, spec.message_bytes)
    shown = ", ".join(f"{k}={config.get(k)}" for k in (*wanted, MESSAGE_BYTES_KEY))
    hint = f"kafka-configs --alter --entity-type topics --entity-name {name} --add-config <key>=<value>"
    checks.append(Check("kafka.topic_config", not wrong, "; ".join(wrong) if wrong else f"{name}: {shown}", hint))
    return checks


def _acl_check(admin: Any, kafka: Any, topic: str, timeout_s: float) -> Check:
    """What the broker says this principal may do (ACLs, or everything when no authorizer runs): on the topic
    when it exists (READ, WRITE, DESCRIBE needed), else on the cluster (CREATE, to make the topic)."""
    from confluent_kafka import TopicCollection

    if kafka.security_protocol != "SASL_SSL":
        return Check("kafka.acls", True, "PLAINTEXT: no authentication, no ACLs to check")
    principal = f"User:{kafka.sasl_username}"
    try:
        meta = admin.list_topics(topic, timeout=timeout_s).topics.get(topic)
        if meta is not None and meta.error is None:
            where, needed = f"topic {topic}", {"READ", "WRITE", "DESCRIBE"}
            future = admin.describe_topics(TopicCollection([topic]), include_authorized_operations=True)[topic]
        else:
            where, needed = "the cluster", {"CREATE"}
            future = admin.describe_cluster(include_authorized_operations=True)
        ops = {op.name for op in (future.result(timeout=timeout_s).authorized_operations or [])}
    except Exception as exc:  # noqa: BLE001
        return Check("kafka.acls", False, f"{principal}: {_error(exc)}", "the user needs DESCRIBE on the cluster")
    ok = "ALL" in ops or needed <= ops
    return Check(
        "kafka.acls",
        ok,
        f"{principal} on {where}: " + (", ".join(sorted(ops)) or "nothing allowed"),
        f"kafka-acls --add --allow-principal {principal} "
        + " ".join(f"--operation {op.title()}" for op in sorted(needed))
        + (f" --topic {topic}" if needed != {"CREATE"} else " --cluster")
        + " (and the ledger topic, transactional ids)",
    )


# -- S3, MLflow, Dagster, PostgreSQL ---------------------------------------------------------------------------
def check_s3(settings: Settings, timeout_s: float = 5.0) -> list[Check]:
    from botocore.exceptions import BotoCoreError, ClientError

    where = settings.s3_endpoint or "AWS S3"
    client = make_s3_client(
        settings.s3_endpoint,
        settings.s3_access_key,
        settings.s3_secret_key,
        settings.s3_region,
        max_attempts=1,
        connect_timeout=timeout_s,
        read_timeout=timeout_s,
    )
    checks = []
    for bucket in settings.buckets:
        name = f"s3.bucket {bucket}"
        try:
            client.list_objects_v2(Bucket=bucket, MaxKeys=1)
            checks.append(Check(name, True, f"{where}: readable with these credentials"))
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "?")
            if code in ("NoSuchBucket", "404"):
                hint = f"create it (`aws s3 mb s3://{bucket}`), or set PIPELINE_S3_BUCKET"
            else:
                hint = "check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (or the role) and the bucket policy"
            checks.append(Check(name, False, f"{where}: {code}", hint))
        except BotoCoreError as exc:
            checks.append(Check(name, False, f"{where}: {_error(exc)}", _s3_hint(settings, exc)))
    return checks


def _s3_hint(settings: Settings, exc: Exception) -> str:
    from botocore.exceptions import NoCredentialsError

    if settings.s3_endpoint is None and isinstance(exc, NoCredentialsError):
        return (
            "PIPELINE_S3_ENDPOINT is unset and no local stack S3 runs, so this is AWS S3, and boto3 found no "
            f"credentials: set AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (or a role), or start S3 ({STACK_HINT})"
        )
    if settings.s3_endpoint is None:
        return f"this is AWS S3 (PIPELINE_S3_ENDPOINT is unset): check the network and AWS_REGION, or start S3 ({STACK_HINT})"
    return f"nothing usable answers at {settings.s3_endpoint}: start S3 ({STACK_HINT}) or fix PIPELINE_S3_ENDPOINT"


def _http_check(name: str, url: str, path: str, hint: str, timeout_s: float) -> Check:
    answer = http_get(url.rstrip("/") + path, timeout=timeout_s)
    if answer is None:
        return Check(name, False, f"{url}: no answer", hint)
    return Check(name, answer[0] == 200, f"{url}: HTTP {answer[0]}", hint)


def check_mlflow(settings: Settings, timeout_s: float = 5.0) -> list[Check]:
    uri = settings.mlflow_tracking_uri
    if not uri.startswith(("http://", "https://")):
        return [Check("mlflow", True, f"{uri}: a local store, nothing to reach")]
    return [_http_check("mlflow", uri, "/health", f"start MLflow ({STACK_HINT}) or set MLFLOW_TRACKING_URI", timeout_s)]


def check_dagster(settings: Settings, timeout_s: float = 5.0) -> list[Check]:
    hint = "start Dagster (`pipeline-project stack up --with-dagster`) or set PIPELINE_DAGSTER_URL"
    return [_http_check("dagster", settings.dagster_url, "/server_info", hint, timeout_s)]


def check_postgres(settings: Settings, timeout_s: float = 5.0) -> list[Check]:
    import psycopg2

    hint = f"start PostgreSQL ({STACK_HINT}) or fix PIPELINE_POSTGRES_URL / PGPASSWORD"
    try:
        conn = psycopg2.connect(settings.postgres_url, connect_timeout=max(1, int(timeout_s)))
        try:
            with conn.cursor() as cur:
                cur.execute("SHOW server_version")
                version = cur.fetchone()[0]
        finally:
            conn.close()
    except psycopg2.Error as exc:
        return [Check("postgres", False, _error(exc), hint)]
    host = settings.postgres_url.rsplit("@", 1)[-1]
    return [Check("postgres", True, f"{host}: PostgreSQL {version}")]


CHECKS = ("kafka", "s3", "mlflow", "dagster", "postgres")


def run_checks(
    settings: Settings,
    spec: TopicSpec,
    *,
    sasl_password: str | None = None,
    only: tuple[str, ...] = CHECKS,
    timeout_s: float = 5.0,
) -> Iterator[Check]:
    """Every chosen check, in `CHECKS` order, as each finishes."""
    runners: dict[str, Callable[[], list[Check]]] = {
        "kafka": lambda: check_kafka(settings, spec, sasl_password, timeout_s),
        "s3": lambda: check_s3(settings, timeout_s),
        "mlflow": lambda: check_mlflow(settings, timeout_s),
        "dagster": lambda: check_dagster(settings, timeout_s),
        "postgres": lambda: check_postgres(settings, timeout_s),
    }
    unknown = set(only) - set(CHECKS)
    if unknown:
        raise ValueError(f"unknown check(s) {', '.join(sorted(unknown))}; choose from {', '.join(CHECKS)}")
    for name in CHECKS:
        if name in only:
            yield from runners[name]()


def check_services(settings: Settings, only: str | None = None, timeout_s: float = 5.0) -> Iterator[Check]:
    """`run_checks` of the services `settings` name, `only` a comma-separated subset of `CHECKS`, against the
    default layout of the settings' topic."""
    from pipeline_project.settings import KAFKA_SASL_PASSWORD_ENV, secret

    chosen = tuple(n.strip() for n in only.split(",") if n.strip()) if only else CHECKS
    spec = TopicSpec(name=settings.topic)
    password = secret(KAFKA_SASL_PASSWORD_ENV)
    return run_checks(settings, spec, sasl_password=password, only=chosen, timeout_s=timeout_s)
