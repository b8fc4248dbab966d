"""Dead letters: malformed messages the loader skipped instead of stopping at them forever.

A message off the wire format (`format`) would otherwise stop every training run at the same
offset. The loader skips it, moves its cursor past it and records a `DeadLetter` (topic,
partition, offset, reason): in `loader.dead_letters` and as the count `metrics()["dead_letters"]`.
With a dead-letter topic configured, `DeadLetterSink` also produces it there: the original value
and headers plus `dlq.*` headers, keyed `<topic>/<partition>/<offset>`. The topic is compacted, so
a message that a later run meets again is kept once there; the count is per loader, so a dead
letter met in the dropped short last batch (the saved position stays before it) is counted again
by the run that resumes there. Produce failures are logged, never raised: the count is the signal
that must not fail.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from typing import Any

from pipeline_project.streaming.kafka_client import KafkaSettings
from pipeline_project.streaming.topics import ensure_topic

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DeadLetter:
    topic: str
    partition: int
    offset: int
    reason: str
    value: bytes | None = field(default=None, repr=False, compare=False)  # the original message, for the sink
    headers: list | None = field(default=None, repr=False, compare=False)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("value")
        d.pop("headers")
        return d

    def key(self) -> str:
        return f"{self.topic}/{self.partition}/{self.offset}"


class DeadLetterSink:
    """Produces dead letters to `topic`, created (compacted, one partition) like the data topic's ledger."""

    def __init__(self, kafka: KafkaSettings, topic: str, *, source_topic: str, timeout_s: float = 30.0):
        self.topic = topic
        admin = kafka.make_admin()
        md = admin.list_topics(topic=source_topic, timeout=timeout_s).topics[source_topic]
        rf = min(len(p.replicas) for p in md.partitions.values())
        ensure_topic(admin, topic, partitions=1, replication_factor=rf, min_insync_replicas=min(2, rf),
                     config={"cleanup.policy": "compact"}, timeout_s=timeout_s, retention_ms=None,
                     retention_bytes=None)  # fmt: skip
        self.producer = kafka.make_producer()
        self.failed = 0

    def send(self, letter: DeadLetter) -> None:
        headers = [
            *(letter.headers or []),
            ("dlq.topic", letter.topic.encode()),
            ("dlq.partition", str(letter.partition).encode()),
            ("dlq.offset", str(letter.offset).encode()),
            ("dlq.reason", letter.reason.encode()),
        ]
        self.producer.produce(
            self.topic, key=letter.key().encode(), value=letter.value or b"", headers=headers, on_delivery=self._done
        )
        self.producer.poll(0)

    def _done(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.failed += 1
            log.warning("dead letter %s not delivered to %s: %s", (msg.key() or b"").decode(), self.topic, err)

    def close(self, timeout_s: float = 10.0) -> None:
        left = self.producer.flush(timeout_s)
        if left:
            self.failed += left
            log.warning("%d dead letters still undelivered to %s after %gs", left, self.topic, timeout_s)
