"""Dead letters: malformed messages the loader skipped instead of stopping at them forever.

A message off the wire format (`format`) would otherwise stop every training run at the same
offset. The loader skips it, moves its cursor past it and records a `DeadLetter` (topic,
partition, offset, reason): in `loader.dead_letters` and as the count `metrics()["dead_letters"]`
(this invocation's; `"dead_letters_lineage"` the training lineage's).

Policy over a training lineage (`LineageBudget`): `max_dead_letters` bounds the malformed messages of
the whole lineage, not of one invocation. The count rides in the loader state that every checkpoint
saves (`state["dead_letters"]`) and follows the saved position: a dead letter is counted in a state
exactly when the state's cursor is past it, so a resumed run neither loses nor repeats one (a dead
letter in the dropped short last batch is counted by the run that resumes before it, once). More
than the budget raises DeadLetterLimitError naming the lineage's count.

By default (`LoaderConfig.dead_letter_topic` unset) `DeadLetterSink` produces each dead letter to
`<topic>.dlq`, created on the first one (compacted, one partition): the original value and headers
plus `dlq.*` headers, keyed `<topic>/<partition>/<offset>`, so a message met again is kept once.
Produce failures (a missing ACL, say) are logged and counted in `failed`, never raised: the count
is the signal that must not fail.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from pipeline_project.streaming.kafka.client import KafkaSettings
from pipeline_project.streaming.kafka.topics import ensure_topic

log = logging.getLogger(__name__)

LINEAGE_STATE_KEY = "dead_letters"  # in a loader state: the lineage's dead letters this rank's state carries


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
    """Produces dead letters to `topic`, created (compacted, one partition, replicated like the data topic) with
    the first one, so a run without malformed messages never touches it."""

    def __init__(self, kafka: KafkaSettings, topic: str, *, source_topic: str, timeout_s: float = 30.0):
        self.kafka, self.topic, self.source_topic, self.timeout_s = kafka, topic, source_topic, timeout_s
        self.producer: Any = None
        self.failed = 0

    def _open(self) -> Any:
        admin = self.kafka.make_admin()
        md = admin.list_topics(topic=self.source_topic, timeout=self.timeout_s).topics[self.source_topic]
        rf = min(len(p.replicas) for p in md.partitions.values())
        ensure_topic(
            admin,
            self.topic,
            partitions=1,
            replication_factor=rf,
            min_insync_replicas=min(2, rf),
            config={"cleanup.policy": "compact"},
            timeout_s=self.timeout_s,
            retention_ms=None,
            retention_bytes=None,
        )
        return self.kafka.make_producer()

    def send(self, letter: DeadLetter) -> None:
        if self.producer is None:
            try:
                self.producer = self._open()
            except Exception as exc:  # noqa: BLE001 - the count is the signal; a sink that fails must not stop it
                self.failed += 1
                log.warning(
                    "dead letter %s not delivered: dead-letter topic %s unavailable: %s", letter.key(), self.topic, exc
                )
                return
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
        left = self.producer.flush(timeout_s) if self.producer is not None else 0
        if left:
            self.failed += left
            log.warning("%d dead letters still undelivered to %s after %gs", left, self.topic, timeout_s)


class LineageBudget:
    """`max_dead_letters` over a training lineage: the count the resumed states carry plus this loader's since.

    Rank 0's state carries the lineage's count at load plus its own since; every other rank's its own since, so
    the states of one checkpoint sum to the lineage's count whatever the next world size. Each rank enforces
    `limit - (lineage count at load) - (its own since)`: exact with one rank; with several, a rank sees the
    others' dead letters of the same invocation at the next resume.
    """

    def __init__(self, limit: int, rank: int):
        self.limit, self.rank = limit, rank
        self.before = 0  # the lineage's dead letters in the states loaded
        self.carried = 0  # the part of them this rank's state carries on
        self.at_load = 0  # this loader's own count when they were loaded

    def load(self, state: Mapping[str, Any] | Sequence[Mapping[str, Any]], own: int) -> None:
        one = isinstance(state, Mapping)
        states = [state] if one else list(state)
        self.before = sum(int(s.get(LINEAGE_STATE_KEY) or 0) for s in states)
        self.carried = self.before if one or self.rank == 0 else 0
        self.at_load = own

    def remaining(self, own: int) -> int:
        return self.limit - self.before - (own - self.at_load)

    def carry(self, own: int) -> int:
        return self.carried + own - self.at_load

    def lineage(self, own: int) -> int:
        return self.before + own - self.at_load

    def explain(self, exc: BaseException) -> None:
        """Say in the DeadLetterLimitError that the budget is the lineage's (its cause stays the last dead letter)."""
        exc.args = (
            f"{exc.args[0] if exc.args else exc} (max_dead_letters={self.limit} is per training lineage: "
            f"{self.before} dead letters before this invocation, carried in its checkpoint state)",
        )
