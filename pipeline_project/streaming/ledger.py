"""The ledger of a token-block topic: which ledger keys were produced, with what content, where.

The ledger is the compacted, 1-partition companion topic `<topic>.ledger`, replicated like its data
topic. Its key is the ledger key (e.g. the asset partition key), its value a `ProduceReport` as
JSON (`LEDGER_SCHEMA`), and a tombstone removes a key. The producer writes the record in the same
Kafka transaction as the blocks it describes, so a read_committed reader (`read_ledger`) sees a
key exactly when its blocks are visible too. `produce_blocks` (in `producer`) uses the ledger to
produce each key once.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, TopicPartition

from pipeline_project.streaming.errors import ReadTimeoutError, TopicMissingError, is_transient
from pipeline_project.streaming.kafka_client import KafkaSettings
from pipeline_project.streaming.topics import ensure_topic

LEDGER_SUFFIX = ".ledger"
LEDGER_SCHEMA = 1


@dataclass
class ProduceReport:
    """What one `produce_blocks` call wrote (or, with `reused=True`, found already recorded): the ledger value."""

    topic: str
    ledger_key: str
    content_hash: str
    tokenizer_name: str
    tokenizer_hash: str
    seq_len: int
    offsets: dict[int, tuple[int, int]]  # partition -> (first, last) offsets written, inclusive
    messages: int
    blocks: int
    tokens: int
    bytes: int
    seconds: float  # the whole call: setup, reading/tokenizing the input, producing, commit
    mb_per_s: float  # bytes / seconds
    transactional_id: str
    reused: bool = False
    source: str = ""
    stage_seconds: dict[str, float] = field(default_factory=dict)
    kafka_stats: dict[str, float] = field(default_factory=dict)
    packing: dict[str, int] = field(default_factory=dict)
    produced_at: float = field(default_factory=time.time)

    def to_ledger_json(self) -> bytes:
        d = asdict(self)
        d["offsets"] = {str(p): list(r) for p, r in self.offsets.items()}
        d["schema"] = LEDGER_SCHEMA
        d.pop("reused")
        return json.dumps(d, sort_keys=True).encode()

    @classmethod
    def from_ledger_json(cls, raw: bytes) -> ProduceReport:
        d = json.loads(raw)
        d.pop("schema", None)
        d["offsets"] = {int(p): (int(r[0]), int(r[1])) for p, r in d["offsets"].items()}
        return cls(**d)

    def offsets_markdown(self) -> str:
        rows = [f"| {p} | {first} | {last} | {last - first + 1} |" for p, (first, last) in sorted(self.offsets.items())]
        return "\n".join(["| partition | first offset | last offset | offsets |", "|---|---|---|---|", *rows])

    def to_metadata(self) -> dict[str, Any]:
        """Flat, JSON-friendly summary for asset metadata (the Dagster layer wraps the values)."""
        return {
            "topic": self.topic,
            "ledger_key": self.ledger_key,
            "reused": self.reused,
            "blocks": self.blocks,
            "tokens": self.tokens,
            "messages": self.messages,
            "bytes": self.bytes,
            "seq_len": self.seq_len,
            "tokenizer": self.tokenizer_name,
            "tokenizer_hash": self.tokenizer_hash,
            "content_hash": self.content_hash,
            "seconds": round(self.seconds, 3),
            "mb_per_s": round(self.mb_per_s, 2),
            "offsets": {str(p): [first, last] for p, (first, last) in sorted(self.offsets.items())},
            "offsets_table": self.offsets_markdown(),
            "stage_seconds": {k: round(v, 3) for k, v in self.stage_seconds.items()},
            "kafka_stats": self.kafka_stats,
            "packing": self.packing,
        }

    def fingerprint(self) -> tuple[str, str, int]:
        return (self.content_hash, self.tokenizer_hash, self.seq_len)


def ledger_topic(topic: str) -> str:
    return topic + LEDGER_SUFFIX


def ensure_ledger_topic(admin: Any, topic: str, timeout_s: float = 30.0) -> None:
    """Compacted 1-partition ledger, replicated like its data topic."""
    md = admin.list_topics(topic=topic, timeout=timeout_s).topics.get(topic)
    if md is None or md.error is not None or not md.partitions:
        raise TopicMissingError(f"data topic {topic!r} does not exist; create it with ensure_topic first")
    rf = min(len(p.replicas) for p in md.partitions.values())
    ensure_topic(
        admin,
        ledger_topic(topic),
        partitions=1,
        replication_factor=rf,
        min_insync_replicas=min(2, rf),
        config={"cleanup.policy": "compact"},
        timeout_s=timeout_s,
    )


def read_ledger(settings: KafkaSettings, topic: str, timeout_s: float = 30.0) -> dict[str, ProduceReport]:
    """All committed ledger entries of `topic`, latest per key (tombstones remove a key).

    A missing ledger topic reads as empty; not reaching the ledger's end within `timeout_s` raises ReadTimeoutError.
    """
    name = ledger_topic(topic)
    consumer = settings.make_consumer(overrides={"enable.partition.eof": True, "isolation.level": "read_committed"})
    try:
        md = consumer.list_topics(topic=name, timeout=timeout_s).topics.get(name)
        if md is None or md.error is not None:
            return {}
        parts = sorted(md.partitions)
        consumer.assign([TopicPartition(name, p, OFFSET_BEGINNING) for p in parts])
        pending = set(parts)
        entries: dict[str, ProduceReport] = {}
        deadline = time.monotonic() + timeout_s
        while pending:
            if time.monotonic() > deadline:
                raise ReadTimeoutError(f"reading ledger {name} did not reach its end within {timeout_s:g}s")
            for msg in consumer.consume(num_messages=1000, timeout=0.5):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        pending.discard(msg.partition())
                        continue
                    if is_transient(err):
                        continue  # librdkafka retries on its own; the deadline bounds the wait
                    raise KafkaException(err)
                key = (msg.key() or b"").decode()
                if msg.value() is None:
                    entries.pop(key, None)
                else:
                    entries[key] = ProduceReport.from_ledger_json(msg.value())
        return entries
    finally:
        consumer.close()
