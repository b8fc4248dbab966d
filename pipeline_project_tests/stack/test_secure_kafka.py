"""The secure Kafka profile (`stack up --secure`) on a throw-away 3-broker SASL_SSL cluster.

What it must show: the streaming producer and loader and the ingest assets work over SASL_SSL; a wrong password, an
untrusted CA and a PLAINTEXT client each fail at once with one clear line; users are made with Kafka's own tools.
"""

from __future__ import annotations

import json
import socket
import stat
import struct
import subprocess
import time
import uuid

import dagster as dg
import numpy as np
import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from pipeline_project.cli.app import app
from pipeline_project.defs.resources.kafka import KafkaResource
from pipeline_project.stack import Stack, StackConfig, StackError
from pipeline_project.stack.security import BROKER_USER, CLIENT_USER
from pipeline_project.stack.tls import generate_ca
from pipeline_project.streaming.kafka.client import (
    KafkaAuthenticationError,
    KafkaRefusedError,
    KafkaSettings,
    KafkaTLSError,
)
from pipeline_project.streaming.kafka.topics import ensure_topic
from pipeline_project.streaming.produce.producer import produce_blocks
from pipeline_project.streaming.produce.request import ProducerConfig, ProduceRequest
from pipeline_project_tests.secure_kafka import SecureCluster, isolated_resources, secure_stack

SEQ = 64


@pytest.fixture(scope="session")
def secure(request) -> SecureCluster:
    return secure_stack(request)


# -- without a cluster ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_every_supported_mechanism_reaches_the_client_config(mechanism):
    s = KafkaSettings(
        bootstrap_servers="k:1", security_protocol="SASL_SSL", sasl_mechanism=mechanism, sasl_username="u",
        sasl_password="p", ssl_ca_location="/ca.pem",
    )  # fmt: skip
    assert s.producer_config()["sasl.mechanism"] == mechanism


def test_an_unsupported_mechanism_is_rejected():
    with pytest.raises(ValidationError, match="sasl_mechanism"):
        KafkaSettings(bootstrap_servers="k:1", security_protocol="SASL_SSL", sasl_mechanism="GSSAPI",
                      sasl_username="u", sasl_password="p")  # fmt: skip


def test_an_unknown_profile_is_a_one_line_stack_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PIPELINE_KAFKA_SECURITY", "tls")
    with pytest.raises(StackError, match=r"^PIPELINE_KAFKA_SECURITY='tls' is not a Kafka security profile"):
        StackConfig(state_dir=tmp_path)


def test_secure_broker_properties_keep_controllers_plaintext_on_loopback(tmp_path):
    stack = Stack(StackConfig(state_dir=tmp_path, kafka_ports=(19092, 19093, 19094),
                              kafka_controller_ports=(19192, 19193, 19194), kafka_security="sasl_ssl"))  # fmt: skip
    kafka = stack.services["kafka"]
    kafka.security.ensure(("127.0.0.1",), "SCRAM-SHA-512")
    props = kafka.server_properties(1)
    assert props["listeners"] == "SASL_SSL://127.0.0.1:19092,CONTROLLER://127.0.0.1:19192"
    assert props["listener.security.protocol.map"] == "SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT"
    assert props["inter.broker.listener.name"] == "SASL_SSL"
    assert "PLAINTEXT://" not in props["listeners"]
    assert props["sasl.enabled.mechanisms"] == "SCRAM-SHA-512,SCRAM-SHA-256,PLAIN"
    settings = stack.settings()
    assert (settings.kafka_security_protocol, settings.kafka_sasl_username) == ("SASL_SSL", CLIENT_USER)
    assert settings.kafka_ssl_ca_location == str(kafka.security.ca_location)


# -- the cluster ------------------------------------------------------------------------------------------------------


def test_secure_cluster_starts_with_private_key_material(secure: SecureCluster):
    print(f"secure 3-broker cluster healthy in {secure.start_s:.1f}s")
    assert secure.start_s < 240
    statuses = secure.stack.status(["kafka"])
    assert all(s.healthy for s in statuses) and "SASL_SSL (SCRAM-SHA-512)" in statuses[0].detail
    kdir = secure.config.state_dir / "kafka"
    assert json.loads((kdir / "storage.json").read_text())["security"] == "sasl_ssl"
    security = secure.config.kafka_secure
    private = [security.tls.ca_key, security.tls.broker_keystore, security.client_properties,
               security.password_file(CLIENT_USER), security.password_file(BROKER_USER),
               *(kdir.glob("broker-*/server.properties"))]  # fmt: skip
    for path in private:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    passwords = [security.password(CLIENT_USER), security.password(BROKER_USER)]
    for log in kdir.glob("broker-*/server.log"):
        text = log.read_text(errors="replace")
        assert not [p for p in passwords if p in text], f"a password is in {log}"
    assert secure.kafka().check_reachable(timeout_s=10) == 3


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"])
def test_each_mechanism_logs_in(secure: SecureCluster, mechanism):
    assert secure.kafka(sasl_mechanism=mechanism).check_reachable(timeout_s=10) == 3


def test_wrong_password_is_one_line_naming_user_and_mechanism(secure: SecureCluster):
    wrong = f"wrong-{uuid.uuid4().hex}"
    started = time.monotonic()
    with pytest.raises(KafkaAuthenticationError) as err:
        secure.kafka(sasl_password=wrong).check_reachable(timeout_s=20)
    message = str(err.value)
    assert time.monotonic() - started < 10, "a refused login must not wait for the timeout"
    assert f"user '{CLIENT_USER}'" in message and "SCRAM-SHA-512" in message and "invalid credentials" in message
    assert "\n" not in message and wrong not in message


def test_a_wrong_password_fails_the_kafka_resource_at_setup(secure: SecureCluster):
    s = secure.kafka(sasl_password="not-it")
    resource = KafkaResource(bootstrap_servers=s.bootstrap_servers, security_protocol="SASL_SSL",
                             sasl_username=CLIENT_USER, sasl_password="not-it", ssl_ca_location=secure.ca)  # fmt: skip
    with pytest.raises(KafkaAuthenticationError, match=f"login of user '{CLIENT_USER}'"):
        resource.setup_for_execution(dg.build_init_resource_context())


def test_an_untrusted_ca_is_one_line_naming_the_ca_file(secure: SecureCluster, tmp_path):
    other_ca = tmp_path / "other-ca.pem"
    generate_ca(other_ca, tmp_path / "other-ca.key", common_name="some other CA")
    with pytest.raises(KafkaTLSError) as err:
        secure.kafka(ssl_ca_location=str(other_ca)).check_reachable(timeout_s=20)
    message = str(err.value)
    assert f"not signed by the CA in ssl_ca_location {other_ca}" in message and "certificate verify failed" in message
    assert "\n" not in message


def test_plaintext_is_refused_on_the_secure_listener(secure: SecureCluster):
    host, port = secure.config.kafka_bootstrap.split(",")[0].split(":")
    with pytest.raises(KafkaRefusedError, match="hung up on a PLAINTEXT client") as err:
        KafkaSettings(bootstrap_servers=secure.config.kafka_bootstrap).check_reachable(timeout_s=20)
    assert "\n" not in str(err.value)
    # On the wire: a well-formed ApiVersions v0 request in plaintext gets no Kafka answer (correlation id 7).
    client_id = b"probe"
    body = struct.pack(">hhih", 18, 0, 7, len(client_id)) + client_id
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(struct.pack(">i", len(body)) + body)
        try:
            answer = sock.recv(64)
        except (ConnectionResetError, TimeoutError):
            answer = b""
    assert answer[4:8] != struct.pack(">i", 7), "the SASL_SSL listener answered a plaintext Kafka request"


def _committed_ends(admin, topic: str, partitions) -> dict[int, int]:
    from confluent_kafka import IsolationLevel, TopicPartition
    from confluent_kafka.admin import OffsetSpec

    req = {TopicPartition(topic, p): OffsetSpec.latest() for p in partitions}
    futures = admin.list_offsets(req, isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=10)
    return {tp.partition: f.result().offset for tp, f in futures.items()}


def test_blocks_produced_over_sasl_ssl_come_back_through_the_loader(secure: SecureCluster):
    from pipeline_project.streaming.load.loader import KafkaBlockLoader, LoaderConfig

    class Tok:
        name, hash = "unit-tok", "feedface"

    kafka = secure.kafka()
    topic = f"secure-{uuid.uuid4().hex[:8]}"
    ensure_topic(kafka.make_admin(), topic, partitions=4, replication_factor=3, min_insync_replicas=2)
    blocks = np.random.default_rng(0).integers(0, 129280, size=(40, SEQ), dtype=np.uint32)
    report = produce_blocks(
        kafka,
        ProduceRequest(
            topic=topic,
            ledger_key="b1",
            content_hash="h",
            source="s",
            seq_len=SEQ,
            tokenizer=Tok,
            config=ProducerConfig(max_message_bytes=SEQ * 4 * 4),
        ),
        iter([blocks]),
    )
    assert report.blocks == 40 and len(report.offsets) == 4
    # Commit markers land on the partitions just after commit_transaction returns: wait until read_committed sees
    # them, since a bounded loader reads what was committed when it starts.
    wanted = {p: last + 2 for p, (_, last) in report.offsets.items()}  # the last block's message, then its marker
    admin, deadline = kafka.make_admin(), time.monotonic() + 30
    while _committed_ends(admin, topic, wanted) != wanted and time.monotonic() < deadline:
        time.sleep(0.2)
    cfg = LoaderConfig(kafka=kafka, topic=topic, seq_len=SEQ, batch_size=8, rank=0, world_size=1,
                       expected_tokenizer_hash=Tok.hash, idle_timeout_s=10.0)  # fmt: skip
    with KafkaBlockLoader(cfg) as loader:
        got = np.concatenate([batch.numpy().astype(np.uint32) for batch in loader])
    assert sorted(map(bytes, got)) == sorted(map(bytes, blocks))


def test_ingest_graph_materializes_over_sasl_ssl(secure: SecureCluster, stack, monkeypatch):
    from pipeline_project.defs.assets import cleaned, raw, token_blocks
    from pipeline_project.defs.partitions import batches
    from pipeline_project.defs.sensors.raw_s3 import raw_s3_sensor
    from pipeline_project.demo.sample.corpus import generate

    monkeypatch.setenv("KAFKA_SASL_PASSWORD", secure.password)  # as the stack hands it to Dagster: never in config
    resources = isolated_resources(secure.settings_with(stack), uuid.uuid4().hex[:8])
    layout = resources["layout"]
    s3 = stack.s3_client()
    for f in generate(seed=5, docs_per_language=3):
        s3.put_object(Bucket=layout.bucket, Key=layout.raw_prefix + f.key.removeprefix("raw/sample/"), Body=f.data)
    with dg.instance_for_test() as instance:
        sensor_resources = {k: resources[k] for k in ("s3", "layout")}
        with dg.build_sensor_context(instance=instance, resources=sensor_resources) as ctx:
            batch = raw_s3_sensor(ctx).run_requests[0].partition_key
        instance.add_dynamic_partitions(batches.name, [batch])
        modules = [raw, cleaned, token_blocks]
        result = dg.materialize([*dg.load_assets_from_modules(modules), *dg.load_asset_checks_from_modules(modules)],
                                resources=resources, partition_key=batch, instance=instance)  # fmt: skip
    assert result.success
    meta = {m.asset_key.to_user_string(): m.metadata for m in
            (e.materialization for e in result.get_asset_materialization_events())}  # fmt: skip
    assert meta["token_blocks"]["blocks"].value > 0
    assert all(e.passed for e in result.get_asset_check_evaluations())


def _cli_env(secure: SecureCluster) -> dict[str, str]:
    return {"PIPELINE_STATE_DIR": str(secure.config.state_dir),
            "PIPELINE_KAFKA_PORTS": ",".join(map(str, secure.config.kafka_ports)),
            "PIPELINE_KAFKA_CONTROLLER_PORTS": ",".join(map(str, secure.config.kafka_controller_ports))}  # fmt: skip


def test_up_secure_prints_the_client_variables_but_not_the_password(secure: SecureCluster):
    result = CliRunner().invoke(app, ["stack", "up", "--secure", "--services", "kafka"], env=_cli_env(secure))
    assert result.exit_code == 0, result.output
    assert "kafka: already running" in result.output
    for name in ("KAFKA_SECURITY_PROTOCOL=SASL_SSL", "KAFKA_SASL_MECHANISM=SCRAM-SHA-512",
                 f"KAFKA_SASL_USERNAME={CLIENT_USER}", f"KAFKA_SSL_CA_LOCATION={secure.ca}"):  # fmt: skip
        assert f"export {name}" in result.output
    password_file = secure.config.kafka_secure.password_file(CLIENT_USER)
    assert f'export KAFKA_SASL_PASSWORD="$(cat {password_file})"' in result.output
    assert secure.password not in result.output


def test_users_are_added_with_kafkas_own_tool_and_env_prints_no_password(secure: SecureCluster):
    env = _cli_env(secure)
    trainer_password = uuid.uuid4().hex
    added = CliRunner().invoke(app, ["stack", "kafka-tool", "configs", "--alter", "--entity-type", "users",
                                     "--entity-name", "trainer", "--add-config",
                                     f"SCRAM-SHA-512=[password={trainer_password}]"], env=env)  # fmt: skip
    assert added.exit_code == 0, added.output
    trainer = secure.kafka(sasl_username="trainer", sasl_password=trainer_password)
    assert trainer.check_reachable(timeout_s=20) == 3

    printed = CliRunner().invoke(app, ["stack", "env"], env=env)
    assert printed.exit_code == 0, printed.output
    assert "export KAFKA_SECURITY_PROTOCOL=SASL_SSL" in printed.output
    assert secure.password not in printed.output
    shell = subprocess.run(["bash", "-c", printed.output + '\nprintf %s "$KAFKA_SASL_PASSWORD"'],
                           capture_output=True, text=True, check=True)  # fmt: skip
    assert shell.stdout == secure.password


def test_a_state_dir_keeps_its_profile(secure: SecureCluster):
    config = secure.config
    again = StackConfig(state_dir=config.state_dir, kafka_ports=config.kafka_ports,
                        kafka_controller_ports=config.kafka_controller_ports)  # fmt: skip
    assert again.kafka_profile == "sasl_ssl" and again.settings().kafka_security_protocol == "SASL_SSL"
    plain = Stack(StackConfig(state_dir=config.state_dir, kafka_ports=config.kafka_ports,
                              kafka_controller_ports=config.kafka_controller_ports, kafka_security="plaintext"))  # fmt: skip
    with pytest.raises(StackError, match=r"formatted for the sasl_ssl profile, not plaintext.*--wipe"):
        plain.status(["kafka"])
