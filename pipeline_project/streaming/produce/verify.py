"""Read-back verification: does the topic hold what a `ProduceReport` claims?

`verify_produced` reads the report's offset ranges with read_committed, so blocks of an aborted or
still-open transaction do not count. It checks that every claimed range is readable up to its last
offset and that the messages, blocks and pad tokens of the report's source add up to the report's counts;
any difference raises ProducedDataMismatchError, a message off the wire format MalformedMessageError.
A report with per-domain counts is also checked domain by domain against the messages' `domain` headers.
"""

from __future__ import annotations

import time
from contextlib import closing
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from pipeline_project.streaming.errors import ProducedDataMismatchError, is_transient
from pipeline_project.streaming.kafka.client import KafkaSettings
from pipeline_project.streaming.kafka.format import decode_message, read_header
from pipeline_project.streaming.ledger.records import ProduceReport


@dataclass
class _Tally:
    messages: int = 0
    blocks: int = 0
    pad_tokens: int = 0
    per_partition: dict[int, int] = field(default_factory=dict)
    domains: dict[str, dict[str, int]] = field(default_factory=dict)

    def add(self, partition: int, blocks: int, pad_tokens: int, domain: str | None) -> None:
        self.per_partition[partition] = self.per_partition.get(partition, 0) + 1
        self.messages += 1
        self.blocks += blocks
        self.pad_tokens += pad_tokens
        if domain is not None:
            d = self.domains.setdefault(domain, {"messages": 0, "blocks": 0, "pad_tokens": 0})
            d["messages"] += 1
            d["blocks"] += blocks
            d["pad_tokens"] += pad_tokens


def verify_produced(settings: KafkaSettings, report: ProduceReport, timeout_s: float = 60.0) -> dict[str, Any]:
    """Read back the report's offset ranges (read_committed) and check its messages and blocks are there.

    Messages in the ranges are matched by their `src` header (other materializations may interleave
    in the same partitions, so give each materialization its own source id), decoded with the
    report's seq_len and tokenizer hash, and counted.
    Raises ProducedDataMismatchError (or MalformedMessageError) on any difference.
    """
    tally = _Tally()
    with closing(_claimed_messages(settings, report, timeout_s)) as claimed:  # closes the consumer on any error
        for msg, header in claimed:
            if header.source != report.source:
                continue
            where = dict(topic=report.topic, partition=msg.partition(), offset=msg.offset())
            arr = decode_message(
                msg.value(),
                msg.headers(),
                expected_seq_len=report.seq_len,
                expected_tokenizer_hash=report.tokenizer_hash,
                **where,
            )
            tally.add(msg.partition(), len(arr), header.pad_tokens, header.domain)
    _check(report, tally)
    return {
        "messages": tally.messages,
        "blocks": tally.blocks,
        "pad_tokens": tally.pad_tokens,
        "messages_per_partition": tally.per_partition,
        "domains": tally.domains,
    }


def _claimed_messages(settings: KafkaSettings, report: ProduceReport, timeout_s: float):
    """Yield (message, header) of every committed message in the report's ranges; raise if a range is short."""
    topic = report.topic
    consumer = settings.make_consumer(overrides={"enable.partition.eof": True, "isolation.level": "read_committed"})
    try:
        consumer.assign([TopicPartition(topic, p, first) for p, (first, _) in report.offsets.items()])
        pending = dict(report.offsets)
        deadline = time.monotonic() + timeout_s
        while pending:
            if time.monotonic() > deadline:
                raise ProducedDataMismatchError(f"{topic}: ranges {pending} not fully readable within {timeout_s:g}s")
            for msg in consumer.consume(num_messages=1000, timeout=0.05):  # see ledger.read_ledger_records
                p = msg.partition()
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF and p in pending:
                        raise ProducedDataMismatchError(
                            f"{topic}[{p}] ends at {msg.offset()} before the claimed last offset {pending[p][1]}"
                        )
                    if err.code() != KafkaError._PARTITION_EOF and not is_transient(err):
                        raise KafkaException(err)
                    continue
                if p not in pending or msg.offset() > pending[p][1]:
                    continue
                header = read_header(msg.headers(), topic=topic, partition=p, offset=msg.offset())
                if msg.offset() == pending[p][1]:
                    del pending[p]
                    consumer.incremental_unassign([TopicPartition(topic, p)])
                yield msg, header
    finally:
        consumer.close()


def _check(report: ProduceReport, tally: _Tally) -> None:
    read = (tally.messages, tally.blocks, tally.pad_tokens)
    if read != (report.messages, report.blocks, report.pad_tokens):
        raise ProducedDataMismatchError(
            f"{report.topic}: read {read[0]} messages / {read[1]} blocks / {read[2]} pad tokens in the claimed "
            f"ranges, the report claims {report.messages} / {report.blocks} / {report.pad_tokens}"
        )
    claimed = {d: {k: c[k] for k in ("messages", "blocks", "pad_tokens")} for d, c in report.domains.items()}
    if report.domains and dict(sorted(tally.domains.items())) != dict(sorted(claimed.items())):
        raise ProducedDataMismatchError(f"{report.topic}: read per domain {tally.domains}, the report claims {claimed}")
