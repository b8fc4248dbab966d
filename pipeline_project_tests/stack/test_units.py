"""Pure logic of the stack package: config, pid-file identity, Kafka node config. No services needed."""

from __future__ import annotations

import json
import os
import re

import psutil
import pytest

from pipeline_project.stack import Stack, StackConfig, StackError, parse_services
from pipeline_project.stack.kafka import KafkaService, kafka_uuid
from pipeline_project.stack.processes import ManagedProcess, _same_command


def test_kafka_uuid_looks_like_kafka_storage_random_uuid():
    ids = {kafka_uuid() for _ in range(200)}
    assert len(ids) == 200
    assert all(re.fullmatch(r"[A-Za-z0-9_-]{22}", i) and not i.startswith("-") for i in ids)


def test_parse_services_rejects_unknown_names_in_one_line():
    assert parse_services("s3, kafka") == ["s3", "kafka"]
    assert parse_services(None) == ["kafka", "s3", "mlflow"]
    with pytest.raises(StackError, match=r"unknown service\(s\) redis; choose from kafka, s3, mlflow, dagster"):
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
