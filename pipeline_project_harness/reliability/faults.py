"""Fault injection on a throw-away local stack: its config on free ports, `kill -9` of its processes, restarts, and
the Kafka cluster facts a fault needs (who coordinates a transaction, who leads a partition, is every partition
back in ISR).

Nothing here touches the shared stack on the default ports: `throwaway_config` picks free ports and a state dir of
its own. Faults are real signals to real processes (`sigkill`); a killed service comes back with `Stack.up`, which
starts only what is not running. What the faults must not break is checked in `invariants`.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psutil
from confluent_kafka import KafkaException
from pydantic import PrivateAttr

from pipeline_project.stack import Stack, StackConfig
from pipeline_project.streaming.kafka.client import KafkaSettings

TRANSACTION_STATE_PARTITIONS = 10  # stack/kafka.py BROKER_DEFAULTS transaction.state.log.num.partitions


# -- the throw-away stack ---------------------------------------------------------------------------------------


def free_ports(n: int) -> list[int]:
    """`n` distinct ports that nothing listens on (held open together while they are picked)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def throwaway_config(state_dir: Path) -> StackConfig:
    """A stack of its own: 3 brokers (RF 3, min ISR 2), S3, MLflow, Postgres and Dagster on free ports."""
    ports = free_ports(10)
    return StackConfig(
        state_dir=state_dir,
        kafka_ports=tuple(ports[0:3]),
        kafka_controller_ports=tuple(ports[3:6]),
        s3_port=ports[6],
        mlflow_port=ports[7],
        postgres_port=ports[8],
        dagster_port=ports[9],
        kafka_security="plaintext",
    )


def kafka_of(stack: Stack) -> KafkaSettings:
    return KafkaSettings(bootstrap_servers=stack.config.kafka_bootstrap, client_id="reliability")


class SlowLinkKafkaSettings(KafkaSettings):
    """KafkaSettings whose transactional producers wait `produce_delay_s` before each data message (a slow link), so
    a transaction stays open long enough to be hit, and call `on_first_data()` at the first data message of the
    first transaction: from then on a kill lands inside a transaction. The ledger topic is not slowed."""

    produce_delay_s: float = 0.0
    _on_first_data: Any = PrivateAttr(default=None)

    def make_transactional_producer(self, transactional_id: str, stats: Any = None, timeout_s: float = 30.0):
        producer = super().make_transactional_producer(transactional_id, stats=stats, timeout_s=timeout_s)
        return _SlowProducer(producer, self.produce_delay_s, self._on_first_data)


class _SlowProducer:
    def __init__(self, producer: Any, delay_s: float, on_first_data: Any) -> None:
        self._producer = producer
        self._delay_s = delay_s
        self._on_first_data = on_first_data

    def produce(self, topic: str, *args: Any, **kwargs: Any) -> Any:
        if not topic.endswith(".ledger"):
            if self._on_first_data is not None:
                self._on_first_data()
                self._on_first_data = None
            if self._delay_s:
                time.sleep(self._delay_s)
                self._producer.poll(0)  # serve delivery reports
        return self._producer.produce(topic, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._producer, name)


# -- faults ---------------------------------------------------------------------------------------------------


def sigkill(stack: Stack, name: str, *, tree: bool = False, timeout: float = 15.0) -> int:
    """`kill -9` the stack process `name` (its whole process tree with `tree`); returns its pid once it is gone."""
    proc = stack.process(name).process()
    assert proc is not None, f"{name} is not running"
    victims = [proc, *proc.children(recursive=True)] if tree else [proc]
    for p in victims:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.send_signal(signal.SIGKILL)
    _, alive = psutil.wait_procs(victims, timeout=timeout)
    assert not alive, f"{name}: {[p.pid for p in alive]} survived SIGKILL"
    return proc.pid


def broker_name(broker_id: int) -> str:
    return f"kafka-{broker_id}"  # stack/kafka.py: node ids 1..n, process names kafka-<id>


def java_string_hash(text: str) -> int:
    """Java's `String.hashCode` (over UTF-16 code units), as a signed 32-bit int."""
    data = text.encode("utf-16-be")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i : i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def transaction_coordinator(settings: KafkaSettings, transactional_id: str, timeout: float = 10.0) -> int:
    """The broker id that coordinates `transactional_id`: the leader of its `__transaction_state` partition
    (Kafka: `Utils.abs(transactionalId.hashCode) % transaction.state.log.num.partitions`)."""
    h = java_string_hash(transactional_id)
    partition = (0 if h == -(1 << 31) else abs(h)) % TRANSACTION_STATE_PARTITIONS  # Kafka's Utils.abs
    return partition_leaders(settings, "__transaction_state", timeout)[partition]


def ensure_transaction_state(settings: KafkaSettings, timeout: float = 60.0) -> None:
    """Create `__transaction_state` (Kafka makes it at the first `init_transactions`), so coordinators are known."""
    settings.make_transactional_producer("reliability-warmup", timeout_s=timeout)
    deadline = time.monotonic() + timeout
    while len({p for p, b in partition_leaders(settings, "__transaction_state").items() if b >= 0}) < (
        TRANSACTION_STATE_PARTITIONS
    ):
        if time.monotonic() > deadline:
            raise TimeoutError("__transaction_state has no leader for every partition")
        time.sleep(0.2)


def partition_leaders(settings: KafkaSettings, topic: str, timeout: float = 10.0) -> dict[int, int]:
    md = settings.make_admin().list_topics(topic=topic, timeout=timeout).topics.get(topic)
    return {p: m.leader for p, m in md.partitions.items()} if md is not None and md.error is None else {}


def busiest_leader(settings: KafkaSettings, topic: str) -> int:
    """The broker leading the most partitions of `topic` (killing it moves the most leaders)."""
    counts = Counter(partition_leaders(settings, topic).values())
    return max(sorted(counts), key=lambda b: counts[b])


def under_replicated(settings: KafkaSettings, timeout: float = 5.0) -> list[str]:
    """`topic[p]` for every partition (internal topics included) without a leader or with a replica out of ISR."""
    md = settings.make_admin().list_topics(timeout=timeout)
    return [
        f"{t}[{p}]"
        for t, tm in md.topics.items()
        for p, pm in tm.partitions.items()
        if pm.leader < 0 or len(pm.isrs) < len(pm.replicas)
    ]


def wait_fully_replicated(settings: KafkaSettings, brokers: int, timeout: float = 120.0) -> float:
    """Wait until `brokers` brokers are live and every partition has its whole replica set in ISR; seconds waited."""
    start = time.monotonic()
    last: Any = None
    while time.monotonic() - start < timeout:
        try:
            md = settings.make_admin().list_topics(timeout=5)
            if len(md.brokers) >= brokers:
                last = under_replicated(settings)
                if not last:
                    return time.monotonic() - start
            else:
                last = f"{len(md.brokers)} brokers live"
        except KafkaException as exc:
            last = exc
        time.sleep(0.5)
    raise TimeoutError(f"cluster not fully replicated within {timeout:g}s: {last}")


def restart(stack: Stack, service: str, *, timeout: float = 180.0) -> float:
    """Start what of `service` is not running (after a kill) and wait until it is healthy; Kafka also waits until
    every partition is fully replicated again. Returns the seconds from the restart to recovery."""
    start = time.monotonic()
    stack.up([service], timeout=timeout)
    if service == "kafka":
        wait_fully_replicated(kafka_of(stack), len(stack.config.kafka_ports), timeout=timeout)
    return time.monotonic() - start
