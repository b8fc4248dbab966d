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

import itertools
import json
import logging
import queue
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import numpy as np
import xxhash
from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, TopicPartition
from pydantic import BaseModel, ConfigDict, Field

from pipeline_project.streaming.format import encode_message, max_blocks_per_message
from pipeline_project.streaming.kafka_client import (
    DeliveryTracker,
    KafkaSettings,
    KafkaStats,
    ensure_topic,
    flush_or_raise,
)
from pipeline_project.streaming.packing import BlockPacker

log = logging.getLogger(__name__)

LEDGER_SUFFIX = ".ledger"
LEDGER_SCHEMA = 1


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


class LedgerConflictError(RuntimeError):
    """The ledger already records different content for this key."""


@dataclass
class ProduceReport:
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


def transactional_id_for(settings: KafkaSettings, topic: str, ledger_key: str) -> str:
    return f"{settings.client_id}.{topic}.{ledger_key}"


def ensure_ledger_topic(admin: Any, topic: str, timeout_s: float = 30.0) -> None:
    """Compacted 1-partition ledger, replicated like its data topic."""
    md = admin.list_topics(topic=topic, timeout=timeout_s).topics.get(topic)
    if md is None or md.error is not None or not md.partitions:
        raise RuntimeError(f"data topic {topic!r} does not exist; create it with ensure_topic first")
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


_TRANSIENT_CODES = {
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError._TRANSPORT,
    KafkaError._ALL_BROKERS_DOWN,
}


def _transient(err: KafkaError) -> bool:
    return err.retriable() or err.code() in _TRANSIENT_CODES


def read_ledger(settings: KafkaSettings, topic: str, timeout_s: float = 30.0) -> dict[str, ProduceReport]:
    """All committed ledger entries of `topic`, latest per key (tombstones remove a key)."""
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
                raise TimeoutError(f"reading ledger {name} did not reach its end within {timeout_s:g}s")
            for msg in consumer.consume(num_messages=1000, timeout=0.5):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        pending.discard(msg.partition())
                        continue
                    if _transient(err):
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


class ProducedDataMismatch(RuntimeError):
    """The topic does not hold what a ProduceReport claims."""


def verify_produced(settings: KafkaSettings, report: ProduceReport, timeout_s: float = 60.0) -> dict[str, Any]:
    """Read back the report's offset ranges (read_committed) and check its messages and blocks are there.

    Messages in the ranges are matched by their `src` header (other materializations may interleave
    in the same partitions, so give each materialization its own source id), decoded with the report's seq_len and tokenizer hash, and counted.
    Raises ProducedDataMismatch (or MalformedMessageError) on any difference.
    """
    from pipeline_project.streaming.format import decode_message, read_header

    topic = report.topic
    consumer = settings.make_consumer(overrides={"enable.partition.eof": True, "isolation.level": "read_committed"})
    per_partition: dict[int, int] = {}
    messages = blocks = 0
    try:
        consumer.assign([TopicPartition(topic, p, first) for p, (first, _) in report.offsets.items()])
        pending = dict(report.offsets)
        deadline = time.monotonic() + timeout_s
        while pending:
            if time.monotonic() > deadline:
                raise ProducedDataMismatch(f"{topic}: ranges {pending} not fully readable within {timeout_s:g}s")
            for msg in consumer.consume(num_messages=1000, timeout=0.5):
                p = msg.partition()
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF and p in pending:
                        raise ProducedDataMismatch(
                            f"{topic}[{p}] ends at {msg.offset()} before the claimed last offset {pending[p][1]}"
                        )
                    if err.code() != KafkaError._PARTITION_EOF and not _transient(err):
                        raise KafkaException(err)
                    continue
                if p not in pending or msg.offset() > pending[p][1]:
                    continue
                where = dict(topic=topic, partition=p, offset=msg.offset())
                header = read_header(msg.headers(), **where)
                if msg.offset() == pending[p][1]:
                    del pending[p]
                    consumer.incremental_unassign([TopicPartition(topic, p)])
                if header.source != report.source:
                    continue
                arr = decode_message(
                    msg.value(),
                    msg.headers(),
                    expected_seq_len=report.seq_len,
                    expected_tokenizer_hash=report.tokenizer_hash,
                    **where,
                )
                per_partition[p] = per_partition.get(p, 0) + 1
                messages += 1
                blocks += len(arr)
    finally:
        consumer.close()
    if (messages, blocks) != (report.messages, report.blocks):
        raise ProducedDataMismatch(
            f"{topic}: read {messages} messages / {blocks} blocks in the claimed ranges, "
            f"the report claims {report.messages} / {report.blocks}"
        )
    return {"messages": messages, "blocks": blocks, "messages_per_partition": per_partition}


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


def prefetch_batches(texts: Iterable[str], batch_docs: int, depth: int) -> Iterator[list[str]]:
    """Batches of `batch_docs` texts, read ahead by a background thread (up to `depth` batches).

    Reading (S3 I/O, decompression) then overlaps tokenization, whose Rust batch call releases
    the GIL. An exception in the reader is re-raised here; closing the generator stops the reader.
    """
    if depth <= 0:
        it = iter(texts)
        while batch := list(itertools.islice(it, batch_docs)):
            yield batch
        return
    q: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(item: tuple[str, Any]) -> None:
        while not stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def reader() -> None:
        try:
            it = iter(texts)
            while not stop.is_set() and (batch := list(itertools.islice(it, batch_docs))):
                put(("batch", batch))
            put(("end", None))
        except BaseException as exc:  # noqa: BLE001 - handed to the consuming thread
            put(("error", exc))

    thread = threading.Thread(target=reader, name="text-prefetch", daemon=True)
    thread.start()
    try:
        while True:
            kind, payload = q.get()
            if kind == "batch":
                yield payload
            elif kind == "error":
                raise payload
            else:
                return
    finally:
        stop.set()
        thread.join(timeout=5)


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
