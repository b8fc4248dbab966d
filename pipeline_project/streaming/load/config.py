"""`LoaderConfig`: everything the Kafka block loader (`loader`) needs, declared once with its defaults."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from pipeline_project.settings import DEFAULT_TOPIC, DistEnv
from pipeline_project.streaming.kafka.client import KafkaSettings
from pipeline_project.streaming.load.mixture import MixtureConfig

DEAD_LETTER_SUFFIX = ".dlq"


def dead_letter_topic_for(topic: str) -> str:
    """The conventional dead-letter topic of a block topic: `<topic>.dlq`."""
    return topic + DEAD_LETTER_SUFFIX


class LoaderConfig(BaseModel):
    """Everything the loader needs; rank and world_size default to torchrun's (`settings.DistEnv`).

    Version 2: malformed messages are skipped into dead letters (up to `max_dead_letters` per training lineage,
    produced to `<topic>.dlq` unless `dead_letter_topic` says otherwise), saved
    cursors are checked against the topic id and the log start offsets (`allow_data_loss`).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    config_version: Literal[2] = 2
    kafka: KafkaSettings
    topic: str = DEFAULT_TOPIC
    # the topic's partition count every rank of the job agreed on (rank 0 reads it, the others are handed it); a
    # partition added since is left to the next invocation. None: this rank reads it itself (one process).
    partitions: int | None = Field(default=None, gt=0)
    seq_len: int = Field(gt=0)
    batch_size: int = Field(gt=0)
    rank: int = Field(default_factory=lambda: DistEnv.from_env().rank, ge=0)
    world_size: int = Field(default_factory=lambda: DistEnv.from_env().world_size, ge=1)
    num_workers: int = Field(default=1, ge=1)
    mode: Literal["bounded", "streaming"] = "bounded"
    # streaming: no data for this long ends the stream; bounded: a partition with no data this long before its end
    # offset is logged as stalled (a broker unreachable) and waited for, up to stall_timeout_s, then ReadTimeoutError
    idle_timeout_s: float = Field(default=10.0, gt=0)
    stall_timeout_s: float = Field(default=300.0, gt=0)
    seed: int = 0
    start_offsets: dict[int, int] | None = None
    end_offsets: dict[int, int] | None = None
    expected_tokenizer_hash: str | None = None
    device: str = "cpu"
    pin_memory: bool | None = None
    prefetch: int = Field(default=2, ge=1)
    # messages per consume() call and its timeout
    consume_messages: int = Field(default=1024, ge=1)
    poll_timeout_s: float = Field(default=0.05, gt=0)
    # a partition whose fetched-but-undelivered messages exceed this is paused until it drains
    max_buffered_messages: int = Field(default=2048, ge=2)
    metadata_timeout_s: float = Field(default=30.0, gt=0)
    # record (partition, offset, block_index) of every delivered block in `loader.trace`
    trace: bool = False
    # a saved cursor below a partition's log start offset (records deleted before they were read) raises
    # DataLossError; True skips to the log start instead, with a warning, counted in metrics()["data_loss_offsets"]
    allow_data_loss: bool = False
    # malformed messages are skipped and recorded (loader.dead_letters, metrics()["dead_letters"]); more than this
    # many in the training lineage (carried in the loader state, so across resumes: dead_letters.LineageBudget)
    # raise DeadLetterLimitError (a wrong tokenizer or seq_len makes every message malformed)
    max_dead_letters: int = Field(default=100, ge=0)
    # also produce each dead letter (original value and headers, plus dlq.* headers) to this topic, created
    # compacted on the first one, keyed by topic/partition/offset. Unset: dead_letter_topic_for(topic); None: none
    dead_letter_topic: str | None = None
    # draw blocks by domain (their `domain` header) at these proportions (`mixture.py`, `mixture_loader.py`);
    # None: every block in the interleave order, exactly as without domains
    mixture: MixtureConfig | None = None
    # honour `<topic>.retractions` (streaming/retractions): read at start, then every `retraction_refresh_s`
    retractions: bool = True
    retraction_refresh_s: float = Field(default=10.0, gt=0)

    @model_validator(mode="before")
    @classmethod
    def _default_dead_letter_topic(cls, data: Any) -> Any:
        if isinstance(data, dict) and "dead_letter_topic" not in data:
            return {**data, "dead_letter_topic": dead_letter_topic_for(data.get("topic") or DEFAULT_TOPIC)}
        return data

    @model_validator(mode="after")
    def _rank_in_world(self) -> LoaderConfig:
        if self.rank >= self.world_size:
            raise ValueError(f"rank {self.rank} must be < world_size {self.world_size}")
        return self
