"""Pure logic of the stack package: config, pid-file identity, Kafka node config. No services needed."""

from __future__ import annotations

import json
import os
import re

import psutil
import pytest

from pipeline_project.stack import Stack, StackConfig, StackError, parse_services
from pipeline_project.stack.dagster import DagsterService
from pipeline_project.stack.kafka.cds import ClassDataSharing
from pipeline_project.stack.kafka.cluster import KafkaService, kafka_uuid
from pipeline_project.stack.processes import ManagedProcess, _same_command


def test_kafka_uuid_looks_like_kafka_storage_random_uuid():
    ids = {kafka_uuid() for _ in range(200)}
    assert len(ids) == 200
    assert all(re.fullmatch(r"[A-Za-z0-9_-]{22}", i) and not i.startswith("-") for i in ids)


def test_parse_services_rejects_unknown_names_in_one_line():
    assert parse_services("s3, kafka") == ["s3", "kafka"]
    assert parse_services(None) == ["kafka", "s3", "mlflow", "postgres"]
    with pytest.raises(
        StackError, match=r"unknown service\(s\) redis; choose from kafka, s3, mlflow, postgres, dagster"
    ):
        parse_services("s3,redis")


def test_kafka_node_config_is_a_combined_kraft_node(tmp_path):
    config = StackConfig(
        state_dir=tmp_path, kafka_ports=(29092, 29093, 29094), kafka_controller_ports=(29192, 29193, 29194)
    )
    props = KafkaService(config).server_properties(2)
    assert props["process.roles"] == "broker,controller"
    assert props["node.id"] == "2"
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:29093,CONTROLLER://127.0.0.1:29193"
    assert props["controller.quorum.bootstrap.servers"] == "127.0.0.1:29192,127.0.0.1:29193,127.0.0.1:29194"
    assert props["default.replication.factor"] == "3"
    assert props["min.insync.replicas"] == "2"
    assert props["transaction.state.log.min.isr"] == "2"
    assert props["auto.create.topics.enable"] == "false"
    assert props["log.dirs"].startswith(str(tmp_path))


def test_mismatched_kafka_port_lists_are_rejected(tmp_path):
    with pytest.raises(StackError, match="3 Kafka broker ports but 2 controller ports"):
        StackConfig(state_dir=tmp_path, kafka_ports=(1, 2, 3), kafka_controller_ports=(4, 5))


def test_ports_come_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("PIPELINE_KAFKA_PORTS", "31001,31002,31003")
    monkeypatch.setenv("PIPELINE_S3_PORT", "31000")
    config = StackConfig(state_dir=tmp_path)
    assert config.kafka_bootstrap == "127.0.0.1:31001,127.0.0.1:31002,127.0.0.1:31003"
    assert config.settings().s3_endpoint == "http://127.0.0.1:31000"


def test_a_malformed_port_variable_is_a_one_line_stack_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PIPELINE_KAFKA_PORTS", "31001,x")
    with pytest.raises(StackError, match=r"^PIPELINE_KAFKA_PORTS='31001,x' is not a comma-separated list of ports$"):
        StackConfig(state_dir=tmp_path)


def test_state_dir_comes_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("PIPELINE_STATE_DIR", str(tmp_path / "elsewhere"))
    assert StackConfig().state_dir == (tmp_path / "elsewhere").resolve()


def test_settings_of_a_stack_point_at_its_ports(tmp_path):
    stack = Stack(state_dir=tmp_path, s3_port=31500, mlflow_port=31600)
    settings = stack.settings()
    assert settings.s3_endpoint == "http://127.0.0.1:31500"
    assert settings.mlflow_tracking_uri == "http://127.0.0.1:31600"


def test_shebang_scripts_match_on_their_arguments():
    assert _same_command(["/venv/bin/python3", "/venv/bin/tool", "-p", "1"], ["/venv/bin/tool", "-p", "1"])
    assert not _same_command(["/venv/bin/python3", "/venv/bin/tool", "-p", "2"], ["/venv/bin/tool", "-p", "1"])
    assert not _same_command(["sleep", "1"], ["sleep"])


def test_a_pid_file_naming_a_foreign_process_is_never_killed(tmp_path):
    """A stale pid file whose pid now belongs to someone else (here: this test process) must not kill it."""
    me = psutil.Process(os.getpid())
    mp = ManagedProcess(
        name="fake", cmd=("java", "-cp", "x", "Main"), pid_file=tmp_path / "x.pid", log_file=tmp_path / "x.log"
    )
    mp.pid_file.write_text(
        json.dumps({"pid": me.pid, "create_time": me.create_time(), "cmd": ["java", "-cp", "x", "Main"]})
    )
    assert mp.process() is None
    assert mp.stop() is False
    assert me.is_running()
    assert not mp.pid_file.exists()


def test_logs_of_an_unknown_process_is_a_clear_error(tmp_path):
    with pytest.raises(StackError, match="no stack process named 'kafka-9'"):
        Stack(state_dir=tmp_path).logs("kafka-9")


def test_class_data_sharing_dumps_on_the_last_broker_until_an_archive_exists(tmp_path):
    cds = ClassDataSharing(
        archive=tmp_path / "jars" / "kafka-classes.jsa", dump=tmp_path / "state" / "classes.jsa.dump"
    )
    assert cds.jvm_opts(dumps=False) == ()
    assert cds.jvm_opts(dumps=True)[0] == f"-XX:ArchiveClassesAtExit={cds.dump}"

    cds.archive.parent.mkdir()
    cds.dump.parent.mkdir()
    cds.dump.write_bytes(b"")
    cds.publish()
    assert not cds.archive.exists(), "an empty dump (a JVM killed before exit) is never published"

    cds.dump.write_bytes(b"classes")
    cds.publish()
    assert cds.archive.read_bytes() == b"classes" and not cds.dump.exists()
    assert list(cds.archive.parent.iterdir()) == [cds.archive], "no staging file is left behind"
    for dumps in (False, True):
        assert cds.jvm_opts(dumps=dumps)[:2] == ("-Xshare:auto", f"-XX:SharedArchiveFile={cds.archive}")

    cds.dump.write_bytes(b"newer")
    cds.publish()
    assert cds.archive.read_bytes() == b"classes" and not cds.dump.exists(), "the published archive is kept"


def test_kafka_brokers_share_one_archive_and_only_the_last_dumps(tmp_path):
    kafka = KafkaService(StackConfig(state_dir=tmp_path))
    cds = kafka.class_data_sharing
    assert cds.dump.parent == kafka.dir and kafka.cds_archive == cds.archive
    dumping = [mp.name for mp in kafka.processes() if any(a.startswith("-XX:ArchiveClassesAtExit") for a in mp.cmd)]
    assert dumping == ([] if cds.archive.exists() else ["kafka-3"])


def test_dagster_prepare_writes_only_under_the_state_dir(tmp_path):
    repo = tmp_path / "repo"
    (repo / "pipeline_project").mkdir(parents=True)
    service = DagsterService(StackConfig(state_dir=tmp_path / "state", repo_root=repo))
    service.prepare()
    assert (service.home / "dagster.yaml").is_file()
    assert list(repo.rglob("*")) == [repo / "pipeline_project"], "the source tree is never written"


def test_s3proxy_stores_on_disk_by_default_or_in_memory_when_asked(tmp_path):
    from pipeline_project.stack.s3 import S3Service

    disk = S3Service(StackConfig(state_dir=tmp_path)).properties()
    assert disk["jclouds.provider"] == "filesystem" and disk["jclouds.filesystem.basedir"].startswith(str(tmp_path))
    memory = S3Service(StackConfig(state_dir=tmp_path, s3_backend="transient")).properties()
    assert memory["jclouds.provider"] == "transient" and "jclouds.filesystem.basedir" not in memory
    with pytest.raises(ValueError, match="filesystem or transient"):
        S3Service(StackConfig(state_dir=tmp_path, s3_backend="ram")).properties()
