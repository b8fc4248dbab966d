"""A three-node Apache Kafka KRaft cluster (each node broker + controller) from the Maven Central jars."""

from __future__ import annotations

import base64
import concurrent.futures
import dataclasses
import json
import logging
import uuid
from pathlib import Path

from pipeline_project.stack.errors import StackError
from pipeline_project.stack.jars import classpath, ensure_jars, java
from pipeline_project.stack.kafka.cds import ClassDataSharing, archive_path
from pipeline_project.stack.kafka.tools import TOOL_ALIASES, kafka_tool, tool_command
from pipeline_project.stack.processes import ManagedProcess, accepts_connections, port_in_use, stop_all
from pipeline_project.stack.security import KafkaSecurity, recorded_profile
from pipeline_project.stack.service import Service, ServiceStatus
from pipeline_project.stack.tls import write_private

# The tool runner lives in kafka_tools.py; re-exported here for bench/bench_producer.py, the streaming tests and
# deploy/local/README.md, which name it as `pipeline_project.stack.kafka.cluster`.
__all__ = ["TOOL_ALIASES", "KafkaService", "kafka_tool", "kafka_uuid", "tool_command"]

BROKER_DEFAULTS = {
    "num.partitions": "8",
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    "offsets.topic.replication.factor": "3",
    "offsets.topic.num.partitions": "10",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "transaction.state.log.num.partitions": "10",
    "share.coordinator.state.topic.replication.factor": "3",
    "share.coordinator.state.topic.min.isr": "2",
    "group.initial.rebalance.delay.ms": "0",
    "auto.create.topics.enable": "false",
}

LAST_BROKER_GRACE_S = 5.0

JVM_OPTS = (
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-Djava.awt.headless=true",
)

LOG4J2 = """\
status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = OUT
logger.request.name = kafka.request.logger
logger.request.level = WARN
logger.statechange.name = state.change.logger
logger.statechange.level = WARN
logger.clients.name = org.apache.kafka.clients
logger.clients.level = WARN
"""


def kafka_uuid() -> str:
    """A Kafka `Uuid` string (url-safe base64 of 16 random bytes), as `kafka-storage random-uuid` prints."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


def _quiet_logger() -> logging.Logger:
    logger = logging.getLogger("pipeline_project.stack.kafka.cluster.librdkafka")
    logger.setLevel(logging.CRITICAL)
    logger.propagate = False
    return logger


class KafkaService(Service):
    name = "kafka"

    @property
    def node_ids(self) -> list[int]:
        return list(range(1, len(self.config.kafka_ports) + 1))

    @property
    def local_nodes(self) -> list[int]:
        """The nodes this state dir runs: all of them, or the one of a cluster host (`StackConfig.kafka_nodes`)."""
        return [n for n in self.node_ids if self.config.kafka_nodes is None or n in self.config.kafka_nodes]

    def host(self, node_id: int) -> str:
        return self.config.kafka_hosts[node_id - 1]

    def node_dir(self, node_id: int) -> Path:
        return self.dir / f"broker-{node_id}"

    def _controllers(self) -> list[str]:
        return [f"{h}:{p}" for h, p in zip(self.config.kafka_hosts, self.config.kafka_controller_ports, strict=True)]

    def processes(self) -> list[ManagedProcess]:
        cds = self.class_data_sharing
        procs = []
        for node_id, port, cport in zip(
            self.node_ids, self.config.kafka_ports, self.config.kafka_controller_ports, strict=True
        ):
            if node_id not in self.local_nodes:
                continue
            ndir = self.node_dir(node_id)
            cmd = (
                java(),
                f"-Xms{self.config.kafka_heap}",
                f"-Xmx{self.config.kafka_heap}",
                *JVM_OPTS,
                *cds.jvm_opts(dumps=node_id == self.node_ids[-1]),
                f"-Dlog4j2.configurationFile={ndir / 'log4j2.properties'}",
                "-cp",
                classpath("kafka"),
                "kafka.Kafka",
                str(ndir / "server.properties"),
            )
            procs.append(
                ManagedProcess(
                    name=f"kafka-{node_id}",
                    cmd=cmd,
                    pid_file=ndir / "kafka.pid",
                    log_file=ndir / "server.log",
                    ports=(port, cport),
                    stop_timeout=30.0,
                )
            )
        return procs

    @property
    def class_data_sharing(self) -> ClassDataSharing:
        """The brokers' AppCDS archive (shared by every state dir) and this state dir's dump of it."""
        return ClassDataSharing(archive=archive_path("kafka"), dump=self.dir / "classes.jsa.dump")

    @property
    def cds_archive(self) -> Path:
        """Path of the brokers' AppCDS archive (bench/stack_bench.py reports whether it exists)."""
        return self.class_data_sharing.archive

    def stop(self) -> list[str]:
        # One broker at a time, highest id first: while a majority of controllers is alive each broker's controlled
        # shutdown completes in seconds. Stopped together, the last voters lose quorum and hang until SIGKILL.
        # The last one can never finish (no quorum left to acknowledge it), so it gets a short grace period: what it
        # wrote is in the page cache already, and the next start recovers its log.
        live = [mp for mp in reversed(self.processes()) if mp.is_running()]
        stopped = []
        for i, mp in enumerate(live):
            last = i == len(live) - 1
            stopped.extend(stop_all([dataclasses.replace(mp, stop_timeout=LAST_BROKER_GRACE_S) if last else mp]))
        for mp in self.processes():
            mp.pid_file.unlink(missing_ok=True)
        self.class_data_sharing.publish()
        return stopped[::-1]

    @property
    def security(self) -> KafkaSecurity | None:
        """The sasl_ssl profile's files, or None for plaintext (`kafka_security.py` describes the profile)."""
        return self.config.kafka_secure

    def server_properties(self, node_id: int) -> dict[str, str]:
        host = self.host(node_id)
        port = self.config.kafka_ports[node_id - 1]
        cport = self.config.kafka_controller_ports[node_id - 1]
        listeners = {
            "listeners": f"PLAINTEXT://{host}:{port},CONTROLLER://{host}:{cport}",
            "advertised.listeners": f"PLAINTEXT://{host}:{port},CONTROLLER://{host}:{cport}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
        }
        if self.security is not None:
            listeners = self.security.broker_properties(host, port, cport)
        return {
            "process.roles": "broker,controller",
            "node.id": str(node_id),
            **listeners,
            "controller.listener.names": "CONTROLLER",
            "controller.quorum.bootstrap.servers": ",".join(self._controllers()),
            "log.dirs": str(self.node_dir(node_id) / "data"),
            **BROKER_DEFAULTS,
        }

    def prepare(self) -> None:
        ensure_jars("kafka")
        self.dir.mkdir(parents=True, exist_ok=True)
        self._check_profile()
        if self.security is not None:
            self.security.ensure(tuple(dict.fromkeys(self.config.kafka_hosts)), self.config.kafka_sasl_mechanism)
        for node_id in self.local_nodes:
            ndir = self.node_dir(node_id)
            (ndir / "data").mkdir(parents=True, exist_ok=True)
            props = "".join(f"{k}={v}\n" for k, v in self.server_properties(node_id).items())
            write_private(ndir / "server.properties", props)  # the secure profile's JAAS lines hold passwords
            (ndir / "log4j2.properties").write_text(LOG4J2)
        self._format_storage()

    def _check_profile(self) -> None:
        formatted = recorded_profile(self.dir)
        if formatted is not None and formatted != self.config.kafka_profile:
            raise StackError(
                f"Kafka storage in {self.dir} was formatted for the {formatted} profile, not "
                f"{self.config.kafka_profile}; run `pipeline-project stack down --services kafka --wipe` to reformat it"
            )

    def _format_storage(self) -> None:
        layout_file = self.dir / "storage.json"
        voters_layout = {"controllers": self._controllers(), "nodes": self.node_ids}
        if layout_file.exists():
            formatted = json.loads(layout_file.read_text())
            if formatted["layout"] != voters_layout:
                raise StackError(
                    f"Kafka storage in {self.dir} was formatted for controllers {formatted['layout']['controllers']}; "
                    "run `pipeline-project stack down --services kafka --wipe` to reformat for the new ports"
                )
        else:
            # Same generator as `kafka-storage random-uuid`, without paying for a JVM start.
            cluster_id = kafka_uuid()
            directory_ids = {str(n): kafka_uuid() for n in self.node_ids}
            formatted = {
                "cluster_id": cluster_id,
                "directory_ids": directory_ids,
                "layout": voters_layout,
                "security": self.config.kafka_profile,
            }
        # The secure profile's users: SCRAM credentials that StorageTool writes into the bootstrap metadata.
        users = self.security.scram_format_args() if self.security is not None else []
        initial = ",".join(
            f"{n}@{c}:{formatted['directory_ids'][str(n)]}"
            for n, c in zip(self.node_ids, self._controllers(), strict=True)
        )
        pending = [n for n in self.local_nodes if not (self.node_dir(n) / "data" / "meta.properties").exists()]
        with concurrent.futures.ThreadPoolExecutor(max_workers=len(pending) or 1) as pool:
            futures = {
                n: pool.submit(
                    kafka_tool,
                    "storage",
                    "format",
                    "--cluster-id",
                    formatted["cluster_id"],
                    "--config",
                    str(self.node_dir(n) / "server.properties"),
                    "--initial-controllers",
                    initial,
                    "--ignore-formatted",
                    *users,
                )
                for n in pending
            }
            for future in futures.values():
                future.result()
        layout_file.write_text(json.dumps(formatted, indent=2))

    @property
    def cluster_id(self) -> str | None:
        try:
            return json.loads((self.dir / "storage.json").read_text())["cluster_id"]
        except FileNotFoundError:
            return None

    def client_config(self) -> dict[str, str]:
        """librdkafka settings of a client of this cluster, logged in as the client user in the secure profile."""
        cfg = {"bootstrap.servers": self.config.kafka_bootstrap}
        if self.security is not None and self.security.password() is not None:
            cfg.update(self.security.librdkafka_config(self.config.kafka_sasl_mechanism))
        return cfg

    def _admin(self):
        from confluent_kafka.admin import AdminClient

        return AdminClient({**self.client_config(), "logger": _quiet_logger()})

    def live_brokers(self, timeout: float = 2.0) -> dict[int, str]:
        """Broker id -> host:port from the cluster metadata; empty when no broker answers."""
        admin = self._admin()
        try:
            metadata = admin.list_topics(timeout=timeout)
        except Exception:  # noqa: BLE001 - "not reachable" is the answer, whatever librdkafka raised
            return {}
        return {b.id: f"{b.host}:{b.port}" for b in metadata.brokers.values()}

    def controller_id(self, timeout: float = 2.0) -> int | None:
        admin = self._admin()
        try:
            cluster = admin.describe_cluster(request_timeout=timeout).result(timeout=timeout + 1)
        except Exception:  # noqa: BLE001
            return None
        return cluster.controller.id if cluster.controller is not None else None

    def status(self) -> list[ServiceStatus]:
        self._check_profile()
        procs = self.processes()
        local = [(n, self.host(n), self.config.kafka_ports[n - 1]) for n in self.local_nodes]
        any_port = any(port_in_use(host, port) for _, host, port in local)
        brokers = self.live_brokers() if any_port else {}
        controller = self.controller_id() if brokers else None
        result = []
        for (node_id, host, port), mp in zip(local, procs, strict=True):
            # Registered in the metadata is not enough: a broker registers before its listener binds.
            healthy = node_id in brokers and controller is not None and accepts_connections(host, port)
            detail = f"{len(brokers)}/{len(self.node_ids)} brokers live"
            if controller is not None:
                detail += f", controller {controller}"
            if self.security is not None:
                detail += f", SASL_SSL ({self.config.kafka_sasl_mechanism})"
            result.append(
                ServiceStatus(
                    name=mp.name,
                    service=self.name,
                    healthy=healthy,
                    url=f"{host}:{port}",
                    pid=mp.pid,
                    detail=detail,
                )
            )
        return result
