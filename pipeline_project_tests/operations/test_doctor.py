"""`pipeline-project doctor` against the real stack: healthy -> exit 0; a stopped service, a wrong S3 secret or a
topic with another layout -> a failing line with a hint and a non-zero exit."""

from __future__ import annotations

import socket
import time
import uuid

import pytest
from typer.testing import CliRunner

from pipeline_project.cli.app import app
from pipeline_project.ops.doctor import run_checks
from pipeline_project.streaming.topic import TopicSpec

pytestmark = pytest.mark.stack


@pytest.fixture(scope="module")
def stack_env(local_stack, stack_dagster):
    """The stack's client environment, Dagster's webserver included."""
    return local_stack.config.client_env()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens once the socket closes


def _doctor(env: dict, *args: str):
    result = CliRunner().invoke(app, ["doctor", "--timeout", "3", *args], env=env)
    return result.exit_code, result.output.splitlines()


def _line(lines: list[str], name: str) -> str:
    found = [line for line in lines if line.split(" ", 1)[-1].lstrip().startswith(name + ":")]
    assert len(found) == 1, (name, lines)
    return found[0]


def test_healthy_stack_passes_every_check(stack_env):
    code, lines = _doctor(stack_env)
    assert code == 0, lines
    for name in ("kafka.brokers", "kafka.topic", "kafka.topic_config", "kafka.acls", "s3.bucket pipeline", "mlflow",
                 "dagster", "postgres"):  # fmt: skip
        if name == "kafka.topic_config" and "not created yet" in _line(lines, "kafka.topic"):
            continue
        assert _line(lines, name).startswith("ok"), lines
    assert lines[-1] == "all checks passed"


def test_stopped_services_fail_with_a_hint(stack_env):
    port = _closed_port()
    env = {
        **stack_env,
        "PIPELINE_POSTGRES_URL": f"postgresql://pipeline:pipeline-pg@127.0.0.1:{port}/pipeline",
        "MLFLOW_TRACKING_URI": f"http://127.0.0.1:{port}",
        "PIPELINE_KAFKA_BOOTSTRAP": f"127.0.0.1:{port}",
    }
    code, lines = _doctor(env, "--only", "kafka,mlflow,postgres")
    assert code != 0
    for name in ("kafka.brokers", "mlflow", "postgres"):
        line = _line(lines, name)
        assert line.startswith("FAIL") and "->" in line and "stack up" in line, line


def test_wrong_s3_secret_fails(stack_env):
    code, lines = _doctor({**stack_env, "AWS_SECRET_ACCESS_KEY": "not-the-secret"}, "--only", "s3")
    assert code != 0
    line = _line(lines, "s3.bucket pipeline")
    assert line.startswith("FAIL") and "AWS_SECRET_ACCESS_KEY" in line, line


def test_topic_layout_and_retention_are_checked(stack, stack_env):
    from confluent_kafka.admin import NewTopic

    from pipeline_project.streaming.kafka.client import KafkaSettings

    admin = KafkaSettings.from_settings(stack).make_admin()
    good, odd = f"doctor-{uuid.uuid4().hex[:8]}", f"doctor-{uuid.uuid4().hex[:8]}"
    spec = TopicSpec(name=good)
    futures = admin.create_topics([
        NewTopic(good, 8, 3, config={"min.insync.replicas": "2", "retention.ms": "-1", "retention.bytes": "-1"}),
        NewTopic(odd, 2, 1, config={"retention.ms": "60000", "min.insync.replicas": "1", "cleanup.policy": "compact",
                                    "max.message.bytes": "65536"}),
    ])  # fmt: skip
    for f in futures.values():
        f.result(timeout=30)
    # a broker learns of a new topic a moment after the controller (KRaft): wait until the metadata shows both, or
    # the check reads "not created yet"
    deadline = time.monotonic() + 30
    while not {good, odd} <= set(admin.list_topics(timeout=10).topics) and time.monotonic() < deadline:
        time.sleep(0.2)
    try:
        checks = {c.name: c for c in run_checks(stack, spec, only=("kafka",), timeout_s=5)}
        assert checks["kafka.topic"].ok and checks["kafka.topic_config"].ok, checks
        checks = {c.name: c for c in run_checks(stack, TopicSpec(name=odd), only=("kafka",), timeout_s=5)}
        assert not checks["kafka.topic"].ok and "2 partitions, replication factor 1" in checks["kafka.topic"].detail
        topic_config = checks["kafka.topic_config"]
        assert not topic_config.ok
        for wrong in (
            "retention.ms expected -1, actual 60000",
            "min.insync.replicas expected 2, actual 1",
            "cleanup.policy expected delete, actual compact",
            "max.message.bytes expected at least 148480 (messages of 131072 bytes), actual 65536",
        ):
            assert wrong in topic_config.detail, topic_config.detail
    finally:
        for f in admin.delete_topics([good, odd]).values():
            f.result(timeout=30)


@pytest.fixture(scope="session")
def secure(request):
    from pipeline_project_tests.secure_kafka import secure_stack

    return secure_stack(request)


def test_secured_kafka_logs_in_reports_acls_and_fails_on_a_wrong_password(secure, stack):
    from confluent_kafka.admin import NewTopic

    settings = secure.settings_with(stack)
    spec = TopicSpec(name=f"doctor-{uuid.uuid4().hex[:8]}")
    checks = {c.name: c for c in run_checks(settings, spec, sasl_password=secure.password, only=("kafka",))}
    assert checks["kafka.brokers"].ok, checks
    acls = checks["kafka.acls"]  # no topic yet: may the user create it? (the secure profile runs no authorizer)
    assert acls.ok and "on the cluster" in acls.detail and "CREATE" in acls.detail, acls
    admin = secure.kafka().make_admin()
    admin.create_topics([NewTopic(spec.name, 8, 3)])[spec.name].result(timeout=30)
    checks = {c.name: c for c in run_checks(settings, spec, sasl_password=secure.password, only=("kafka",))}
    acls = checks["kafka.acls"]
    assert acls.ok and f"on topic {spec.name}" in acls.detail and "WRITE" in acls.detail, acls
    wrong = {c.name: c for c in run_checks(settings, spec, sasl_password="wrong", only=("kafka",), timeout_s=3)}
    assert not wrong["kafka.brokers"].ok and "KAFKA_SECURITY_PROTOCOL" in wrong["kafka.brokers"].hint
