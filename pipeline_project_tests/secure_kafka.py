"""One throw-away SASL_SSL Kafka cluster (3 brokers, `stack up --secure`) per test session, on free ports below the
ephemeral range and in a temporary state dir; stopped and wiped when the session ends. The shared stack on the
default ports is never touched.

Test modules wrap `secure_stack(request)` in a session fixture; the cluster is started once for all of them.
`isolated_resources` gives a test its own S3 prefixes, topic and dedup index on the shared stack.
"""

from __future__ import annotations

import dataclasses
import random
import socket
import time
from dataclasses import dataclass

import pytest

from pipeline_project.defs.resources.layout import TopicConfig
from pipeline_project.settings import Settings
from pipeline_project.stack import Stack, StackConfig
from pipeline_project.stack.security import CLIENT_USER
from pipeline_project.streaming.kafka.client import KafkaSettings


@dataclass(frozen=True)
class SecureCluster:
    stack: Stack
    start_s: float

    @property
    def config(self) -> StackConfig:
        return self.stack.config

    @property
    def password(self) -> str:
        password = self.config.kafka_secure.password(CLIENT_USER)
        assert password
        return password

    @property
    def ca(self) -> str:
        return str(self.config.kafka_secure.ca_location)

    def kafka(self, **overrides) -> KafkaSettings:
        """Client settings of the cluster, logged in as its client user; `overrides` replace any field."""
        fields = {"sasl_password": self.password, **overrides}
        return KafkaSettings.from_settings(self.stack.settings(), **fields)

    def settings_with(self, base: Settings) -> Settings:
        """`base` (the shared stack's S3 and MLflow) with Kafka pointed at this cluster."""
        secure = self.stack.settings()
        return dataclasses.replace(
            base,
            kafka_bootstrap=secure.kafka_bootstrap,
            kafka_security_protocol=secure.kafka_security_protocol,
            kafka_sasl_mechanism=secure.kafka_sasl_mechanism,
            kafka_sasl_username=secure.kafka_sasl_username,
            kafka_ssl_ca_location=secure.kafka_ssl_ca_location,
        )


def isolated_resources(settings: Settings, uid: str) -> dict:
    """`build_resources(settings)` with this test's own prefixes, topic and dedup index (a Postgres schema of its
    own), and the cleaning filters in process, as the dagster_layer tests run them."""
    from pipeline_project.defs.resources import build_resources
    from pipeline_project.defs.resources.cleaning import CleaningResource
    from pipeline_project.defs.resources.dedup import DedupIndexResource
    from pipeline_project.defs.resources.layout import PipelineLayout

    layout = PipelineLayout(
        raw_prefix=f"sx-{uid}/raw/",
        shards_prefix=f"sx-{uid}/shards/",
        exclusions_prefix=f"sx-{uid}/exclusions/",
        checkpoints_prefix=f"sx-{uid}/checkpoints/",
        topic=TopicConfig(name=f"sx-{uid}-blocks", seq_len=64, message_bytes=16 * 1024),
    )
    return {
        **build_resources(settings),
        "layout": layout,
        "dedup": DedupIndexResource(postgres_url=settings.postgres_url, schema_name=f"sx_{uid}"),
        "cleaning": CleaningResource(workers=1),
    }


def _free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_ports(n: int) -> tuple[int, ...]:
    """`n` consecutive free ports in 20000-32000 (below the kernel's ephemeral range, away from the stack's own)."""
    for _ in range(200):
        base = random.randrange(20000, 32000 - n)
        ports = tuple(range(base, base + n))
        if all(_free(p) for p in ports):
            return ports
    raise RuntimeError(f"no {n} consecutive free ports found")


_CLUSTER = pytest.StashKey[SecureCluster]()


def secure_stack(request: pytest.FixtureRequest) -> SecureCluster:
    cluster = request.config.stash.get(_CLUSTER, None)
    if cluster is not None:
        return cluster
    ports = free_ports(6)
    state = request.getfixturevalue("tmp_path_factory").mktemp("secure-kafka")
    stack = Stack(
        StackConfig(state_dir=state, kafka_ports=ports[:3], kafka_controller_ports=ports[3:], kafka_security="sasl_ssl")
    )
    started = time.monotonic()
    stack.up(["kafka"], timeout=300)
    cluster = SecureCluster(stack, time.monotonic() - started)
    request.config.add_cleanup(lambda: stack.down(["kafka"], wipe=True))
    request.config.stash[_CLUSTER] = cluster
    return cluster
