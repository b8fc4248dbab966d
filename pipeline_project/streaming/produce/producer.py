"""Transactional producer of token blocks: exactly once per ledger key, in bounded transactions.

A batch (one ledger key) is produced as a sequence of Kafka transactions, each bounded in size.
Its blocks are first staged (`staging`): the input is read, tokenized and packed into a chunk of
at most `transaction_max_bytes` of encoded messages, and only then is a transaction opened, which
produces the chunk and a progress record to the ledger `<topic>.ledger` (`ledger`) and commits.
The last chunk's transaction writes the completion record (key = the ledger key, with the offset
ranges of all chunks) instead, and tombstones the progress record. So a transaction is open only
while a staged chunk is produced, never while S3 is read or text tokenized; a batch has no size
limit; and a partition's last stable offset is held back for seconds, not for the whole batch.

Guarantees, and the failures they survive:

* Exactly once per ledger key, across kills, exceptions and retries. The transactional.id is stable
  per (topic, ledger key), so `init_transactions` fences a zombie of the same key and ends its open
  transaction before the ledger is read (read_committed, up to its high watermark). A completion
  record with the same fingerprint (content hash, tokenizer hash, seq_len) and topic id is returned
  with `reused=True` and nothing is produced; a progress record makes the retry re-read and
  re-tokenize the input, skip the committed block prefix (checked against its hash: `staging`) and
  continue with the next chunk, whose message boundaries and partitions are the ones an
  uninterrupted run has. Another fingerprint, or another topic id (the data topic was deleted and
  recreated under a kept ledger), a progress record of another transactional id, or content retired
  from the key raises LedgerConflictError (`ledger_checks`); `ledger_retire` is the way out.
* An interrupted batch leaves its committed chunks visible to readers: unique, whole blocks that the
  retry does not repeat. Only the completion record reports the batch (and `reused=True`).
* Visible on return: `produce_blocks` returns once the last stable offset of every partition written
  (data and ledger) is past the written records (`visibility`), so a trainer started right after the
  asset reads the whole batch.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import xxhash

from pipeline_project.streaming.errors import LedgerConflictError
from pipeline_project.streaming.kafka.client import KafkaSettings, transactional_id_for
from pipeline_project.streaming.kafka.format import TOKEN_BYTES, max_blocks_per_message
from pipeline_project.streaming.kafka.spans import SpanRecorder
from pipeline_project.streaming.kafka.stats import KafkaStats
from pipeline_project.streaming.kafka.topics import topic_id
from pipeline_project.streaming.kafka.visibility import wait_until_visible
from pipeline_project.streaming.ledger.checks import check_not_retired, check_record, check_same_writer
from pipeline_project.streaming.ledger.index import LedgerIndex
from pipeline_project.streaming.ledger.records import (
    PROGRESS_SUFFIX,
    RETIRED_SUFFIX,
    ProduceReport,
    ProgressRecord,
    ensure_ledger_topic,
    ledger_topic,
    read_ledger_records,
)
from pipeline_project.streaming.produce.records import BatchRecords
from pipeline_project.streaming.produce.request import Instruments, ProducerConfig, ProduceRequest
from pipeline_project.streaming.produce.staging import (
    MessageEncoder,
    StreamHasher,
    StreamItem,
    read_while,
    rechunk,
    skip_blocks,
    stage_chunks,
)
from pipeline_project.streaming.produce.transactions import BatchTotals, BatchTransactions

log = logging.getLogger(__name__)


def produce_blocks(
    settings: KafkaSettings,
    request: ProduceRequest,
    blocks_iter: Iterable[StreamItem],
    instruments: Instruments | None = None,
) -> ProduceReport:
    """Produce (n, seq_len) uint32 block arrays to the request's topic in bounded transactions, once per ledger key.

    Items of `blocks_iter` may be `(domain, blocks)` pairs: each message then holds one domain's blocks and
    carries its `domain` header, and the report counts messages, blocks and tokens per domain.
    `request.packing_hash` is part of the ledger fingerprint ("" for plain packing).
    """
    r, tools = request, instruments or Instruments()
    topic, ledger_key, seq_len, config = r.topic, r.ledger_key, r.seq_len, r.config
    if ledger_key.endswith((PROGRESS_SUFFIX, RETIRED_SUFFIX)):
        raise ValueError(f"ledger key {ledger_key!r} must not end with {PROGRESS_SUFFIX!r} or {RETIRED_SUFFIX!r}")
    txid = r.transactional_id or transactional_id_for(settings, topic, ledger_key)
    started = time.perf_counter()
    items = iter(blocks_iter)
    conn, ahead, ahead_s = _setup(settings, topic, txid, config, ledger_key, r.ledger_index, items)
    retired = [r for r in conn.records.retired.get(ledger_key, []) if r.topic_id == conn.topic_id]
    batch = BatchRecords(
        topic,
        ledger_key,
        r.content_hash,
        r.tokenizer,
        seq_len,
        r.source,
        txid,
        conn.topic_id,
        r.packing_hash,
        retired,
        tools.packer,
        started,
    )
    existing = _completed(batch, conn.records.completed.get(ledger_key), items, conn.admin, config)
    if existing is not None:
        return existing
    progress = conn.records.progress.get(ledger_key)
    hasher = StreamHasher()
    per_message = max_blocks_per_message(seq_len, config.max_message_bytes)
    stream = _resume(batch, rechunk(itertools.chain(ahead, items), per_message), progress, hasher, tools.spans)
    per_chunk = max(1, config.transaction_max_bytes // (per_message * seq_len * TOKEN_BYTES))
    txs = _transactions(batch, conn, progress, config)
    encoder = MessageEncoder(
        tokenizer_name=r.tokenizer.name,
        tokenizer_hash=r.tokenizer.hash,
        source=r.source,
        seq_len=seq_len,
        hasher=hasher,
        spans=tools.spans,
        publication=r.content_hash or None,
    )
    setup_s = time.perf_counter() - started - ahead_s  # the part of the setup that tokenizing did not hide
    loop_started = time.perf_counter()
    tx_s = _write_batch(batch, txs, stage_chunks(stream, per_chunk, encoder), hasher)
    stage = _stage_seconds(setup_s, time.perf_counter() - loop_started + ahead_s, tx_s, tools.timer)
    report = batch.completion(txs.totals, hasher.hexdigest())
    _publish(report, conn, txs, config, stage, started)
    return report


def _setup(
    settings: KafkaSettings,
    topic: str,
    txid: str,
    config: ProducerConfig,
    ledger_key: str,
    ledger_index: LedgerIndex | None,
    items: Iterator[StreamItem],
) -> tuple[_Connection, list[StreamItem], float]:
    """The connection, and the items read ahead meanwhile with the seconds that took.

    Kafka setup (topics, init_transactions, the ledger read) runs in a thread while the input is read and
    tokenized ahead, up to one transaction's worth; that work is dropped when the ledger holds the batch. On
    any failure the setup is waited for: a setup left running could fence the retry's producer."""
    with ThreadPoolExecutor(1, thread_name_prefix="produce-setup") as pool:
        pending = pool.submit(_connect, settings, topic, txid, config, ledger_key, ledger_index)
        try:
            t0 = time.perf_counter()
            ahead = read_while(items, lambda: not pending.done(), config.transaction_max_bytes)
            ahead_s = time.perf_counter() - t0
            return pending.result(), ahead, ahead_s
        except BaseException:
            _close_input(items)
            raise


def _completed(
    batch: BatchRecords,
    existing: ProduceReport | None,
    items: Iterator[StreamItem],
    admin: Any,
    config: ProducerConfig,
) -> ProduceReport | None:
    """The ledger's completion record of this batch (reused, nothing produced); None when there is none."""
    if existing is None and not batch.retired:
        return None
    where = batch.where
    try:
        check_not_retired(batch.retired, batch.fingerprint, where)
    except LedgerConflictError:
        _close_input(items)
        raise
    if existing is None:
        return None
    _close_input(items)
    check_record(existing, batch.fingerprint, batch.topic_id, where, "records")
    wait_until_visible(admin, _last_offsets(batch.topic, existing.offsets), config.visibility_timeout_s)
    existing.reused = True
    existing.seconds = time.perf_counter() - batch.started
    log.info("%s already holds this batch: producing nothing", where)
    return existing


def _resume(
    batch: BatchRecords,
    stream: Iterable[StreamItem],
    progress: ProgressRecord | None,
    hasher: StreamHasher,
    spans: SpanRecorder | None,
) -> Iterable[StreamItem]:
    """`stream` after the block prefix an earlier attempt committed (`progress`), checked against its hash."""
    if progress is None:
        return stream
    where = batch.where
    check_record(progress, batch.fingerprint, batch.topic_id, where, "has a partly produced batch of")
    check_same_writer(progress, batch.txid, where)
    log.info(
        "%s: %d blocks in %d transactions committed by an earlier attempt; continuing after them",
        where,
        progress.blocks,
        progress.transactions,
    )
    # the committed prefix ends on a message boundary: skipping whole messages keeps the uninterrupted cut
    return skip_blocks(
        stream,
        progress.blocks,
        expected_hash=progress.stream_hash,
        hasher=hasher,
        where=where,
        on_skip=spans.skip if spans else None,
    )


def _transactions(
    batch: BatchRecords, conn: _Connection, progress: ProgressRecord | None, config: ProducerConfig
) -> BatchTransactions:
    return BatchTransactions(
        conn.producer,
        txid=batch.txid,
        topic=batch.topic,
        ledger_key=batch.ledger_key,
        partitions=conn.partitions,
        start=xxhash.xxh64_intdigest(batch.ledger_key.encode()) % len(conn.partitions),
        totals=BatchTotals.from_progress(progress),
        flush_timeout_s=config.flush_timeout_s,
        abortable_retries=config.abortable_retries,
    )


def _write_batch(batch: BatchRecords, txs: BatchTransactions, chunks: Iterable[Any], hasher: StreamHasher) -> float:
    """One transaction per staged chunk (reading and tokenizing between them), the last with the completion
    record; the seconds spent in transactions."""
    tx_s = 0.0
    done = False
    for chunk in chunks:  # reads and tokenizes
        t0 = time.perf_counter()
        record = batch.completion if chunk.last else batch.progress_record
        txs.write_chunk(chunk, partial(record, stream_hash=chunk.stream_hash))
        tx_s += time.perf_counter() - t0
        done = chunk.last
        log.info(
            "%s: transaction %d committed, %d blocks so far", batch.where, txs.totals.transactions, txs.totals.blocks
        )
    if not done:  # the input is empty, or an earlier attempt committed all of it
        t0 = time.perf_counter()
        final = replace(txs.totals, transactions=txs.totals.transactions + 1)
        txs.write_completion(batch.completion(final, hasher.hexdigest()))
        txs.totals = final
        tx_s += time.perf_counter() - t0
    return tx_s


def _stage_seconds(setup_s: float, work_s: float, tx_s: float, stage_timer: Any) -> dict[str, float]:
    """Seconds per stage; encoding is the reading and tokenizing time (`work_s`) not spent in the timed stages."""
    timed = stage_timer.seconds if stage_timer else {}
    return {"setup": setup_s, **timed, "encode": max(0.0, work_s - tx_s - sum(timed.values())), "produce": tx_s}


def _publish(
    report: ProduceReport,
    conn: _Connection,
    txs: BatchTransactions,
    config: ProducerConfig,
    stage: dict[str, float],
    started: float,
) -> None:
    """Wait until the written records are visible, then complete the report's timings and statistics."""
    ledger = ledger_topic(report.topic)
    written = {
        **_last_offsets(report.topic, report.offsets),
        **_last_offsets(ledger, txs.tracker.partition_ranges(ledger)),
    }
    visible_s = wait_until_visible(conn.admin, written, config.visibility_timeout_s)
    _serve_stats(conn.producer, conn.stats, config.statistics_interval_ms)
    report.stage_seconds = {**stage, "visible": visible_s}
    report.seconds = time.perf_counter() - started
    report.mb_per_s = report.bytes / report.seconds / 1e6 if report.seconds > 0 else 0.0
    report.kafka_stats = conn.stats.summary() if conn.stats else {}
    log.info(
        "produced %d blocks (%d messages, %.1f MB, %d transactions, %d blocks resumed) to %s in %.2fs: %.1f MB/s, "
        "offsets %s",
        report.blocks,
        report.messages,
        report.bytes / 1e6,
        report.transactions,
        report.resumed_blocks,
        report.topic,
        report.seconds,
        report.mb_per_s,
        report.offsets,
    )


@dataclass
class _Connection:
    admin: Any
    partitions: list[int]
    topic_id: str
    stats: KafkaStats | None
    producer: Any
    records: Any


def _connect(
    settings: KafkaSettings,
    topic: str,
    txid: str,
    config: ProducerConfig,
    ledger_key: str,
    ledger_index: LedgerIndex | None,
) -> _Connection:
    """Ledger topic, partitions, topic id, a transactional producer (fencing older ones), the key's ledger records."""
    timeout = config.ledger_read_timeout_s
    admin = settings.make_admin()
    ensure_ledger_topic(admin, topic, timeout_s=timeout)
    partitions = sorted(admin.list_topics(topic=topic, timeout=timeout).topics[topic].partitions)
    current_id = topic_id(admin, topic, timeout)
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
    # init_transactions fences older producers of this key and ends their open transaction,
    # so the ledger read below sees the final committed state.
    producer = tx_settings.make_transactional_producer(txid, stats=stats)
    records = read_ledger_records(settings, topic, timeout_s=timeout, keys=[ledger_key], index=ledger_index)
    return _Connection(admin, partitions, current_id, stats, producer, records)


def _close_input(items: Iterator[Any]) -> None:
    close = getattr(items, "close", None)
    if close is not None:
        close()


def _serve_stats(producer: Any, stats: KafkaStats | None, interval_ms: int) -> None:
    """Serve queued statistics callbacks; a batch faster than one interval still waits for its first sample."""
    producer.poll(0)
    deadline = time.monotonic() + 1.5 * interval_ms / 1000
    while stats is not None and stats.samples == 0 and time.monotonic() < deadline:
        producer.poll(0.05)


def _last_offsets(topic: str, ranges: dict[int, tuple[int, int]]) -> dict[tuple[str, int], int]:
    return {(topic, p): last for p, (_first, last) in ranges.items()}
