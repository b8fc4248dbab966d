"""The ledger records of one batch that `producer.produce_blocks` writes: completion and progress (`ledger`)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Protocol

from pipeline_project.streaming.ledger.records import ProduceReport, ProgressRecord, fingerprint_of, ledger_topic
from pipeline_project.streaming.produce.packing import DomainPackers
from pipeline_project.streaming.produce.transactions import BatchTotals


class TokenizerIdentity(Protocol):
    name: str
    hash: str


@dataclass
class BatchRecords:
    """One `produce_blocks` call's batch, and the ledger records that describe it (`ledger`)."""

    topic: str
    ledger_key: str
    content_hash: str
    tokenizer: TokenizerIdentity
    seq_len: int
    source: str
    txid: str
    topic_id: str
    packing_hash: str
    retired: list[Any]  # retirements.Retirement of the key's content under this topic id
    packer: DomainPackers | None
    started: float

    @property
    def fingerprint(self) -> str:
        return fingerprint_of(self.content_hash, self.tokenizer.hash, self.seq_len, self.packing_hash)

    @property
    def where(self) -> str:
        return f"ledger {ledger_topic(self.topic)} key {self.ledger_key!r}"

    def completion(self, t: BatchTotals, stream_hash: str) -> ProduceReport:
        packer, seq_len = self.packer, self.seq_len
        return ProduceReport(
            topic=self.topic,
            ledger_key=self.ledger_key,
            content_hash=self.content_hash,
            tokenizer_name=self.tokenizer.name,
            tokenizer_hash=self.tokenizer.hash,
            seq_len=seq_len,
            offsets=t.offsets,
            messages=t.messages,
            blocks=t.blocks,
            tokens=t.blocks * seq_len - t.pad_tokens,
            bytes=t.bytes,
            seconds=time.perf_counter() - self.started,
            mb_per_s=0.0,
            transactional_id=self.txid,
            source=self.source,
            packing=packer.stats() if packer else {},
            topic_id=self.topic_id,
            pad_tokens=t.pad_tokens,
            tail_tokens=packer.tail_tokens if packer else t.padded_blocks * seq_len - t.pad_tokens,
            dropped_tokens=packer.dropped_tokens if packer else 0,
            transactions=t.transactions,
            resumed_blocks=t.resumed_blocks,
            stream_hash=stream_hash,
            domains=domain_report(t, seq_len, packer),
            retired_blocks=sum(r.blocks for r in self.retired),
            packing_hash=self.packing_hash,
        )

    def progress_record(self, t: BatchTotals, stream_hash: str) -> ProgressRecord:
        return ProgressRecord(
            ledger_key=self.ledger_key,
            content_hash=self.content_hash,
            tokenizer_hash=self.tokenizer.hash,
            seq_len=self.seq_len,
            topic_id=self.topic_id,
            transactions=t.transactions,
            messages=t.messages,
            blocks=t.blocks,
            bytes=t.bytes,
            pad_tokens=t.pad_tokens,
            padded_blocks=t.padded_blocks,
            offsets=t.offsets,
            stream_hash=stream_hash,
            transactional_id=self.txid,
            domains=t.domains,
            packing_hash=self.packing_hash,
        )


def domain_report(t: BatchTotals, seq_len: int, packer: DomainPackers | None) -> dict[str, dict[str, int]]:
    """Per-domain messages, blocks, real tokens, pad tokens (and documents, when the packer is at hand)."""
    per = packer.per_domain() if packer else {}
    keys = ("docs", "fim_docs") if packer is not None and packer.fim_docs is not None else ("docs",)
    if packer is not None and packer.rehydrated is not None:
        keys += ("rehydrated_docs", "rehydration_copies")
    return {
        d: {**c, "tokens": c["blocks"] * seq_len - c["pad_tokens"], **{k: per.get(d, {}).get(k, 0) for k in keys}}
        for d, c in sorted(t.domains.items())
    }
