"""`TopicSpec`: a token topic, whole: its name and Kafka layout, and what its blocks are (length, message size,
fill-in-the-middle, rehydration). The producer writes it, the doctor checks it, the trainer reads it; each gets the
one spec instead of a field of its own."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from pipeline_project.settings import DEFAULT_TOPIC
from pipeline_project.streaming.kafka.format import DEFAULT_MESSAGE_BYTES, DEFAULT_SEQ_LEN
from pipeline_project.streaming.produce.fim import FimPolicy


class TopicSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = DEFAULT_TOPIC
    partitions: int = Field(default=8, gt=0)
    replication_factor: int = Field(default=3, gt=0)
    min_insync_replicas: int = Field(default=2, gt=0)
    retention_ms: int = -1
    """-1 (the default) keeps blocks forever: a checkpoint's saved position must still find them. A finite value lets
    the brokers delete blocks a trainer has not read yet (the loader then refuses to start, naming the lost offsets)."""
    retention_bytes: int = -1
    """Per partition; -1 (the default): no size limit."""
    seq_len: int = Field(default=DEFAULT_SEQ_LEN, gt=0)
    """Tokens per block: what the producer packs and the trainer trains on."""
    message_bytes: int = Field(default=DEFAULT_MESSAGE_BYTES, gt=0)
    """Target Kafka message size (`kafka.format.DEFAULT_MESSAGE_BYTES` says why this default)."""
    fim: FimPolicy = FimPolicy()
    """Fill-in-the-middle per domain (`produce.fim`); none by default. Part of the ledger fingerprint."""
    rehydration: bool = False
    """FineWeb-2 rehydration: documents packed as many times as their duplicate-cluster size says. Part of the
    ledger fingerprint."""

    def topic_config(self) -> dict[str, int | str]:
        """Topic configs the topic is created with, and checked against when it exists. Compaction would reject the
        key-less block messages (and delete blocks if they had keys): the topic must only delete."""
        return {"cleanup.policy": "delete", "retention.ms": self.retention_ms, "retention.bytes": self.retention_bytes}
