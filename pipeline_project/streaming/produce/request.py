"""What one call of the block producer is asked to do: `ProduceRequest` (the batch and where it goes) and
`ProducerConfig` (how it is produced)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from pipeline_project.streaming.kafka.format import DEFAULT_MESSAGE_BYTES
from pipeline_project.streaming.kafka.spans import SpanRecorder
from pipeline_project.streaming.ledger.index import LedgerIndex
from pipeline_project.streaming.produce.fim import FimPolicy
from pipeline_project.streaming.produce.packing import DomainPackers

# a text, (domain, text), or (domain, text, weight): packed `weight` times in a row (`cleaning.rehydration`)
Document = str | tuple[str | None, str] | tuple[str | None, str, int]


class ProducerConfig(BaseModel):
    """Knobs of the block producer; bump `version` when semantics change."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: int = 2
    max_message_bytes: int = Field(default=DEFAULT_MESSAGE_BYTES, gt=0)
    # encoded messages staged per transaction; a chunk holds at least one message
    transaction_max_bytes: int = Field(default=64 << 20, gt=0)
    # covers producing one staged chunk (never reading or tokenizing); >= the producer's delivery.timeout.ms
    transaction_timeout_ms: int = Field(default=180_000, gt=0)
    flush_timeout_s: float = Field(default=300.0, gt=0)
    # a transaction that an abort clears (a partition leader moved mid-transaction) is produced again in process
    abortable_retries: int = Field(default=3, ge=0)
    ledger_read_timeout_s: float = Field(default=30.0, gt=0)
    visibility_timeout_s: float = Field(default=60.0, gt=0)  # commit -> visible to read_committed readers
    statistics_interval_ms: int = Field(default=500, ge=0)
    text_batch_docs: int = Field(default=512, gt=0)  # texts per encode_batch call
    prefetch_batches: int = Field(default=2, ge=0)  # text batches read ahead in a thread (0: inline)
    pad_tail: bool = True  # the batch's partial last block is padded (format.PAD_TOKEN), not dropped
    fim: FimPolicy = FimPolicy()  # fill-in-the-middle per domain (`fim`); off by default; part of the fingerprint
    spans: bool = True  # a `spans` header per message: which documents its tokens came from (`spans`)
    # the fingerprint of the documents' rehydration weights (`cleaning.rehydration.fingerprint`), "" when off;
    # part of the ledger fingerprint, as FIM's is
    rehydration: str = ""


@dataclass(frozen=True)
class ProduceRequest:
    """One batch to produce into a token topic: where it goes, what it is, and how it is produced.

    `ledger_key` names the batch in `<topic>.ledger`, `content_hash` its cleaned content (a retry with other
    content is refused). `tokenizer` is the identity the blocks are stamped with (`TokenizerInfo` when
    `tokenize_and_produce` tokenizes). `ledger_index` (`ledger.index.PostgresLedgerIndex`): the ledger is read from
    where the index has it, not from the start. `transactional_id`: None for the batch's own (`transactional_id_for`).
    """

    topic: str
    ledger_key: str
    content_hash: str
    source: str
    seq_len: int
    tokenizer: Any
    config: ProducerConfig = field(default_factory=ProducerConfig)
    ledger_index: LedgerIndex | None = None
    transactional_id: str | None = None
    packing_hash: str = ""  # how documents became blocks beyond tokenizer and seq_len (`tokenize.packing_hash`)


@dataclass
class Instruments:
    """What `tokenize_and_produce` watches the stream with: its stage timer, the packers and the span recorder."""

    timer: Any = None  # tokenize.StageTimer
    packer: DomainPackers | None = None
    spans: SpanRecorder | None = None
