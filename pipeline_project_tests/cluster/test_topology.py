"""The cluster's hosts as the stack's services see them: each binds and advertises its own host's address.

Pure configuration, no namespaces: runs in the fast tier (the harness itself is `test_cluster.py`, marker `cluster`).
"""

from __future__ import annotations

import dataclasses

import pytest

from pipeline_project.cluster import ClusterSpec
from pipeline_project.cluster.netns import wrap
from pipeline_project.stack import StackConfig, StackError
from pipeline_project.stack.dagster import DagsterService
from pipeline_project.stack.kafka.cluster import KafkaService
from pipeline_project.stack.mlflow import MlflowService
from pipeline_project.stack.postgres import SAMENET_RULE, PostgresService
from pipeline_project.stack.s3 import S3Service

SPEC = ClusterSpec(root="/nonexistent/cluster")
HOSTS = {h.name: h for h in SPEC.hosts()}


def config_of(name: str) -> StackConfig:
    return SPEC.host_config(HOSTS[name])


def test_clients_are_told_each_hosts_own_address():
    settings = SPEC.stack_config().settings()
    assert settings.kafka_bootstrap == "10.77.0.11:9092,10.77.0.12:9092,10.77.0.13:9092"
    assert settings.s3_endpoint == "http://10.77.0.21:9000"
    assert settings.postgres_url.endswith("@10.77.0.22:5432/pipeline")
    assert settings.mlflow_tracking_uri == "http://10.77.0.23:5000"
    assert settings.dagster_url == "http://10.77.0.24:3000"
    env = SPEC.stack_config().client_env()
    assert "127.0.0.1" not in " ".join(env.values()) and "localhost" not in " ".join(env.values())


def test_a_broker_host_runs_its_own_node_bound_to_its_address():
    kafka = KafkaService(config_of("broker-2"))
    assert [mp.name for mp in kafka.processes()] == ["kafka-2"]
    props = kafka.server_properties(2)
    assert props["listeners"] == "PLAINTEXT://10.77.0.12:9092,CONTROLLER://10.77.0.12:9093"
    assert props["advertised.listeners"] == props["listeners"]
    assert props["controller.quorum.bootstrap.servers"] == "10.77.0.11:9093,10.77.0.12:9093,10.77.0.13:9093"
    assert str(kafka.node_dir(2)).startswith("/nonexistent/cluster/hosts/broker-2/")


def test_every_other_service_binds_its_hosts_address():
    (postgres,) = PostgresService(config_of("postgres")).processes()
    assert "listen_addresses=10.77.0.22" in postgres.cmd
    (mlflow,) = MlflowService(config_of("mlflow")).processes()
    assert mlflow.cmd[mlflow.cmd.index("--host") + 1] == "10.77.0.23"
    assert mlflow.env["MLFLOW_S3_ENDPOINT_URL"] == "http://10.77.0.21:9000"
    webserver, _ = DagsterService(config_of("dagster")).processes()
    assert webserver.cmd[webserver.cmd.index("-h") + 1] == "10.77.0.24"
    assert webserver.env["PIPELINE_POSTGRES_URL"].endswith("@10.77.0.22:5432/pipeline")
    assert S3Service(config_of("s3")).properties()["s3proxy.endpoint"] == "http://10.77.0.21:9000"


def test_the_local_stack_keeps_loopback_and_all_three_brokers(tmp_path):
    config = StackConfig(state_dir=tmp_path, kafka_ports=(19092, 19093, 19094),
                         kafka_controller_ports=(19192, 19193, 19194))  # fmt: skip
    assert config.kafka_bootstrap == "127.0.0.1:19092,127.0.0.1:19093,127.0.0.1:19094"
    kafka = KafkaService(config)
    assert [mp.name for mp in kafka.processes()] == ["kafka-1", "kafka-2", "kafka-3"]
    assert kafka.server_properties(3)["listeners"] == "PLAINTEXT://127.0.0.1:19094,CONTROLLER://127.0.0.1:19194"


def test_postgres_on_a_network_address_admits_its_subnet_once(tmp_path):
    service = PostgresService(dataclasses.replace(config_of("postgres"), state_dir=tmp_path))
    service.data_dir.mkdir(parents=True)
    hba = service.data_dir / "pg_hba.conf"
    hba.write_text("host all all 127.0.0.1/32 scram-sha-256\n")
    service._allow_own_subnet()
    service._allow_own_subnet()
    assert hba.read_text().splitlines().count(SAMENET_RULE) == 1
    local = PostgresService(StackConfig(state_dir=tmp_path / "local"))
    local.data_dir.mkdir(parents=True)
    (local.data_dir / "pg_hba.conf").write_text("")
    local._allow_own_subnet()
    assert (local.data_dir / "pg_hba.conf").read_text() == ""  # loopback stack: as initdb made it


@pytest.mark.parametrize(
    ("subnet", "prefix", "message"),
    [
        ("8.8.8.0/24", "pp", "private /24"),
        ("10.77.0.0/16", "pp", "private /24"),
        ("10.77.0.0/24", "averylongprefix", "interface names"),
        ("10.77.0.0/24", "p-p", "alphanumeric"),
    ],
)
def test_a_bad_subnet_or_prefix_is_refused_in_one_line(subnet, prefix, message):
    with pytest.raises(StackError, match=message):
        ClusterSpec(subnet=subnet, prefix=prefix)


def test_hosts_have_distinct_addresses_names_and_dirs_and_run_in_their_namespace():
    hosts = SPEC.hosts()
    assert len(hosts) == 9
    for attr in ("address", "netns", "veth", "dir"):
        assert len({getattr(h, attr) for h in hosts}) == len(hosts)
    assert all(len(h.veth) <= 15 for h in hosts)
    argv = wrap(HOSTS["trainer-1"], ["python", "-V"])
    assert argv[:4] == ("ip", "netns", "exec", "pp-trainer-1") and argv[-2:] == ("python", "-V")
    assert str(HOSTS["trainer-1"].tmp) in argv


def test_no_setting_of_a_cluster_process_points_at_loopback(monkeypatch):
    from pipeline_project.cluster import Cluster
    from pipeline_project.settings import Settings

    for key, value in Cluster(SPEC).env(HOSTS["trainer-1"]).items():
        monkeypatch.setenv(key, value)
    settings = Settings()
    loopback = {
        f.name: value
        for f in dataclasses.fields(settings)
        if isinstance(value := getattr(settings, f.name), str) and ("127.0.0.1" in value or "localhost" in value)
    }
    assert loopback == {}
    assert settings.pushgateway_url == ""  # "off": the cluster has no Prometheus host
