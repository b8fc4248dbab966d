"""Transactional producer of token blocks, idempotent per ledger key.

One call = one Kafka transaction that writes the block messages AND a ledger record to the
compacted companion topic `<topic>.ledger` (key = ledger key, e.g. the asset partition key).
Either both become visible to read_committed consumers or neither does. Before producing, the
ledger is read (read_committed): if the key is already there with the same content fingerprint,
nothing is produced and the recorded report is returned with `reused=True`; a different
fingerprint is a LedgerConflictError. The transactional.id is stable per (topic, ledger key), so
`init_transactions` fences a zombie producer of the same key and aborts its open transaction
before the ledger is read.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
from typing import Any, Protocol

import numpy as np
import xxhash
from confluent_kafka import KafkaException
from pydantic import BaseModel, ConfigDict, Field

from pipeline_project.streaming.errors import LedgerConflictError
from pipeline_project.streaming.format import encode_message, max_blocks_per_message
from pipeline_project.streaming.kafka_client import DeliveryTracker, KafkaSettings, flush_or_raise
from pipeline_project.streaming.kafka_stats import KafkaStats
from pipeline_project.streaming.ledger import ProduceReport, ensure_ledger_topic, ledger_topic, read_ledger
from pipeline_project.streaming.packing import BlockPacker
from pipeline_project.streaming.prefetch import prefetch_batches
from pipeline_project.streaming.verify import verify_produced

# ProduceReport, read_ledger, ledger_topic and verify_produced live in `ledger` / `verify`; they are
# re-exported here for callers that import the whole producer API from this module.
__all__ = [
    "LedgerConflictError",
    "ProduceReport",
    "ProducerConfig",
    "ledger_topic",
    "produce_blocks",
    "read_ledger",
    "tokenize_and_produce",
    "transactional_id_for",
    "verify_produced",
]

log = logging.getLogger(__name__)


class ProducerConfig(BaseModel):
    """Knobs of the block producer; bump `version` when semantics change."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: int = 1
    max_message_bytes: int = Field(default=900_000, gt=0)
    transaction_timeout_ms: int = Field(default=600_000, gt=0)  # tokenizing runs inside the transaction
    flush_timeout_s: float = Field(default=300.0, gt=0)
    ledger_read_timeout_s: float = Field(default=30.0, gt=0)
    statistics_interval_ms: int = Field(default=500, ge=0)
    text_batch_docs: int = Field(default=512, gt=0)  # texts per encode_batch call
    prefetch_batches: int = Field(default=2, ge=0)  # text batches read ahead in a thread (0: inline)
    pad_tail: bool = False  # see packing.BlockPacker.flush


class TokenizerIdentity(Protocol):
    name: str
    hash: str


def transactional_id_for(settings: KafkaSettings, topic: str, ledger_key: str) -> str:
    return f"{settings.client_id}.{topic}.{ledger_key}"


def _rechunk(blocks_iter: Iterable[np.ndarray], per_message: int) -> Iterator[np.ndarray]:
    """Regroup arbitrary (k, seq_len) arrays into messages of exactly `per_message` blocks (last may be short)."""
    pending: list[np.ndarray] = []
    have = 0
    for blocks in blocks_iter:
        if not len(blocks):
            continue
        pending.append(blocks)
        have += len(blocks)
        if have < per_message:
            continue
        joined = np.concatenate(pending) if len(pending) > 1 else pending[0]
        n_full = (have // per_message) * per_message
        for i in range(0, n_full, per_message):
            yield joined[i : i + per_message]
        rest = joined[n_full:]
        pending, have = ([rest], len(rest)) if len(rest) else ([], 0)
    if have:
        yield np.concatenate(pending) if len(pending) > 1 else pending[0]


def produce_blocks(
    settings: KafkaSettings,
    topic: str,
    blocks_iter: Iterable[np.ndarray],
    *,
    tokenizer: TokenizerIdentity,
    seq_len: int,
    source: str,
    ledger_key: str,
    content_hash: str,
    transactional_id: str | None = None,
    config: ProducerConfig | None = None,
    _stage_timer: _StageTimer | None = None,
    _packer: BlockPacker | None = None,
) -> ProduceReport:
    """Produce (n, seq_len) uint32 block arrays to `topic` in one transaction, once per ledger key."""
    config = config or ProducerConfig()
    txid = transactional_id or transactional_id_for(settings, topic, ledger_key)
    started = time.perf_counter()

    admin = settings.make_admin()
    ensure_ledger_topic(admin, topic, timeout_s=config.ledger_read_timeout_s)
    md = admin.list_topics(topic=topic, timeout=config.ledger_read_timeout_s).topics[topic]
    partitions = sorted(md.partitions)

    stats = KafkaStats() if config.statistics_interval_ms else None
    tx_settings = settings.model_copy(
        update={
            "statistics_interval_ms": config.statistics_interval_ms or settings.statistics_interval_ms,
            "producer_overrides": {
                "transaction.timeout.ms": config.transaction_timeout_ms,
                **settings.producer_overrides,
            },
        }
    )
    # init_transactions fences older producers of this key and aborts their open transaction,
    # so the ledger read below sees the final committed state.
    producer = tx_settings.make_transactional_producer(txid, stats=stats)

    fingerprint = (content_hash, tokenizer.hash, seq_len)
    existing = read_ledger(settings, topic, timeout_s=config.ledger_read_timeout_s).get(ledger_key)
    if existing is not None:
        if existing.fingerprint() == fingerprint:
            existing.reused = True
            existing.seconds = time.perf_counter() - started
            log.info("ledger %s already holds %s: producing nothing", ledger_topic(topic), ledger_key)
            return existing
        raise LedgerConflictError(
            f"ledger {ledger_topic(topic)} key {ledger_key!r} records content {existing.content_hash} "
            f"(tokenizer {existing.tokenizer_hash[:12]}, seq_len {existing.seq_len}) at offsets {existing.offsets}; "
            f"refusing to add content {content_hash} (tokenizer {tokenizer.hash[:12]}, seq_len {seq_len}) "
            f"under the same key"
        )

    per_message = max_blocks_per_message(seq_len, config.max_message_bytes)
    start = xxhash.xxh64_intdigest(ledger_key.encode()) % len(partitions)
    tracker = DeliveryTracker()
    messages = blocks = nbytes = 0
    producer.begin_transaction()
    produce_started = time.perf_counter()
    setup_s = produce_started - started  # ledger topic check, init_transactions (fencing), ledger read
    try:
        for chunk in _rechunk(blocks_iter, per_message):
            if chunk.shape[1] != seq_len:
                raise ValueError(f"block of length {chunk.shape[1]} given, expected seq_len {seq_len}")
            value, headers = encode_message(
                chunk, tokenizer_name=tokenizer.name, tokenizer_hash=tokenizer.hash, source=source
            )
            partition = partitions[(start + messages) % len(partitions)]
            _produce(producer, topic, value, headers, partition, tracker)
            messages += 1
            blocks += len(chunk)
            nbytes += len(value)
            tracker.raise_for_failures()
        flush_or_raise(producer, tracker, config.flush_timeout_s)
        offsets = tracker.partition_ranges(topic)
        seconds = time.perf_counter() - started
        stage = {"setup": setup_s, **(_stage_timer.seconds if _stage_timer else {})}
        if _stage_timer:
            stage["produce"] = max(0.0, time.perf_counter() - produce_started - sum(_stage_timer.seconds.values()))
        report = ProduceReport(
            topic=topic,
            ledger_key=ledger_key,
            content_hash=content_hash,
            tokenizer_name=tokenizer.name,
            tokenizer_hash=tokenizer.hash,
            seq_len=seq_len,
            offsets=offsets,
            messages=messages,
            blocks=blocks,
            tokens=blocks * seq_len,
            bytes=nbytes,
            seconds=seconds,
            mb_per_s=nbytes / seconds / 1e6 if seconds > 0 else 0.0,
            transactional_id=txid,
            source=source,
            stage_seconds=stage,
            packing=_packer.stats() if _packer else {},
        )
        producer.produce(
            ledger_topic(topic), key=ledger_key.encode(), value=report.to_ledger_json(), on_delivery=tracker.on_delivery
        )
        flush_or_raise(producer, tracker, config.flush_timeout_s)
        producer.commit_transaction(config.flush_timeout_s)
    except BaseException:
        _abort_quietly(producer, txid)
        raise
    producer.poll(0)  # serve the last stats callback
    report.seconds = time.perf_counter() - started
    report.mb_per_s = nbytes / report.seconds / 1e6 if report.seconds > 0 else 0.0
    report.kafka_stats = stats.summary() if stats else {}
    log.info(
        "produced %d blocks (%d messages, %.1f MB) to %s in %.2fs: %.1f MB/s, offsets %s",
        blocks,
        messages,
        nbytes / 1e6,
        topic,
        report.seconds,
        report.mb_per_s,
        offsets,
    )
    return report


def _produce(producer: Any, topic: str, value: bytes, headers: list, partition: int, tracker: DeliveryTracker) -> None:
    while True:
        try:
            producer.produce(topic, value=value, headers=headers, partition=partition, on_delivery=tracker.on_delivery)
            break
        except BufferError:  # local queue full: let librdkafka drain it
            producer.poll(0.05)
    producer.poll(0)


def _abort_quietly(producer: Any, txid: str) -> None:
    try:
        producer.abort_transaction(30)
    except KafkaException as exc:  # e.g. fenced: the broker aborts it for us
        log.warning("abort of transaction %s failed: %s", txid, exc)


class _StageTimer:
    def __init__(self) -> None:
        self.seconds: dict[str, float] = {"read": 0.0, "tokenize": 0.0, "pack": 0.0}


def _timed_blocks(
    texts: Iterable[str], tokenizer: Any, packer: BlockPacker, config: ProducerConfig, timer: _StageTimer
) -> Iterator[np.ndarray]:
    batches = prefetch_batches(texts, config.text_batch_docs, config.prefetch_batches)
    try:
        while True:
            t0 = time.perf_counter()
            batch = next(batches, None)
            t1 = time.perf_counter()
            timer.seconds["read"] += t1 - t0  # time spent waiting on the reader
            if batch is None:
                break
            ids = tokenizer.encode_batch(batch)
            t2 = time.perf_counter()
            out = packer.add(ids)
            timer.seconds["tokenize"] += t2 - t1
            timer.seconds["pack"] += time.perf_counter() - t2
            if len(out):
                yield out
    finally:
        batches.close()
    t0 = time.perf_counter()
    last = packer.flush(pad=config.pad_tail)
    timer.seconds["pack"] += time.perf_counter() - t0
    if len(last):
        yield last


def tokenize_and_produce(
    settings: KafkaSettings,
    topic: str,
    texts: Iterable[str],
    *,
    tokenizer: Any,
    seq_len: int,
    source: str,
    ledger_key: str,
    content_hash: str,
    transactional_id: str | None = None,
    config: ProducerConfig | None = None,
) -> ProduceReport:
    """texts -> DeepSeek tokenizer (batch API) -> BlockPacker -> produce_blocks, with per-stage timings.

    `tokenizer` is a `TokenizerInfo`. Texts are only read when the ledger does not already hold
    this key; they are read ahead in a background thread (`config.prefetch_batches`).
    `stage_seconds` has setup / read / tokenize / pack / produce: read is time spent waiting on
    the reader, produce is the rest of the produce loop (serialising, waiting on Kafka).
    """
    config = config or ProducerConfig()
    packer = BlockPacker(seq_len, tokenizer.eos_id)
    timer = _StageTimer()
    return produce_blocks(
        settings,
        topic,
        _timed_blocks(texts, tokenizer, packer, config, timer),
        tokenizer=tokenizer,
        seq_len=seq_len,
        source=source,
        ledger_key=ledger_key,
        content_hash=content_hash,
        transactional_id=transactional_id,
        config=config,
        _stage_timer=timer,
        _packer=packer,
    )
