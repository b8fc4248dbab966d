"""The ledger index on the stack's brokers and PostgreSQL: a keyed read through it reads only the ledger records
written since the last read and answers as a full read does (progress records, completions, tombstones); a
recreated ledger is not answered from the old one's cache; the index down falls back to a full read; the
cache's writes are idempotent and only move forward."""

from __future__ import annotations

import logging
import threading

import numpy as np
import pytest

from pipeline_project.streaming.kafka.topics import ensure_topic, topic_id
from pipeline_project.streaming.ledger.index import PostgresLedgerIndex
from pipeline_project.streaming.ledger.records import (
    ProgressRecord,
    ensure_ledger_topic,
    ledger_topic,
    progress_key,
    read_ledger_records,
)
from pipeline_project.streaming.produce.producer import produce_blocks
from pipeline_project.streaming.produce.request import ProducerConfig, ProduceRequest

from .kafka_helpers import kafka_settings, recreate_topic, unique_topic

pytestmark = pytest.mark.stack

SEQ = 64
CFG = ProducerConfig(max_message_bytes=SEQ * 4 * 5, statistics_interval_ms=0)


class FakeTok:
    name = "unit-tok"
    hash = "deadbeef"


def _produce(s, topic, key, index, seed=0):
    blocks = np.random.default_rng(seed).integers(0, 129280, size=(12, SEQ), dtype=np.uint32)
    return produce_blocks(
        s,
        ProduceRequest(
            topic=topic,
            ledger_key=key,
            content_hash=f"h-{key}-{seed}",
            source=key,
            seq_len=SEQ,
            tokenizer=FakeTok,
            config=CFG,
            ledger_index=index,
        ),
        [blocks],
    )


def _as_json(records):
    return (
        {k: r.to_ledger_json() for k, r in records.completed.items()},
        {k: r.to_json() for k, r in records.progress.items()},
    )


def _progress(key: str) -> bytes:
    return ProgressRecord(
        ledger_key=key, content_hash="h", tokenizer_hash="t", seq_len=SEQ, topic_id="x", transactions=1, messages=1,
        blocks=5, bytes=1, pad_tokens=0, padded_blocks=0, offsets={0: (0, 0)}, stream_hash="s", transactional_id="tx",
    ).to_json()  # fmt: skip


def test_a_keyed_read_through_the_index_reads_only_what_was_written_since(stack, pg_url):
    s = kafka_settings(stack)
    topic = unique_topic("ledger-index")
    ensure_topic(s.make_admin(), topic, partitions=2)
    index = PostgresLedgerIndex(pg_url)
    for i in range(5):
        _produce(s, topic, f"b{i}", index, seed=i)

    full = read_ledger_records(s, topic)
    assert full.read == 5 and sorted(full.completed) == [f"b{i}" for i in range(5)]
    # each produce read the ledger through the index before it wrote: the last completion is the one not in it
    assert read_ledger_records(s, topic, keys=["b0"], index=index).read == 1
    for i in range(5):
        keyed = read_ledger_records(s, topic, keys=[f"b{i}"], index=index)
        assert keyed.read == 0  # every record is below the index's offset already
        assert _as_json(keyed) == ({f"b{i}": full.completed[f"b{i}"].to_ledger_json()}, {})
    again = _produce(s, topic, "b2", index, seed=2)  # the completion comes from the cache: nothing produced
    assert again.reused

    # a batch in progress, then complete: its progress record and then the tombstone arrive through Kafka
    producer = s.make_transactional_producer(f"test-ledger-index-{topic}")
    for records in ([(progress_key("k"), _progress("k"))],
                    [("k", full.completed["b0"].to_ledger_json()), (progress_key("k"), None)]):  # fmt: skip
        producer.begin_transaction()
        for key, value in records:
            producer.produce(ledger_topic(topic), key=key.encode(), value=value)
        producer.commit_transaction(30)
        keyed = read_ledger_records(s, topic, keys=["k"], index=index)
        assert keyed.read == len(records)
        expected = read_ledger_records(s, topic, keys=["k"])  # no index: from offset 0
        assert _as_json(keyed) == _as_json(expected)
    assert set(keyed.completed) == {"k"} and not keyed.progress
    cached = read_ledger_records(s, topic, keys=["k"], index=index)  # now all from the cache, tombstone included
    assert cached.read == 0 and _as_json(cached) == _as_json(expected)


def test_a_recreated_ledger_is_not_answered_from_the_old_ledgers_cache(stack, pg_url):
    """With the old cache answering, the batch would read as produced (`reused`) and never reach the new topic."""
    s = kafka_settings(stack)
    topic = unique_topic("ledger-recreated")
    admin = s.make_admin()
    ensure_topic(admin, topic, partitions=2)
    index = PostgresLedgerIndex(pg_url)
    _produce(s, topic, "b0", index)
    old_id = topic_id(admin, ledger_topic(topic))
    recreate_topic(s, ledger_topic(topic), partitions=1, config={"cleanup.policy": "compact"})
    recreate_topic(s, topic, partitions=2)
    ensure_ledger_topic(admin, topic)
    assert topic_id(admin, ledger_topic(topic)) != old_id
    assert read_ledger_records(s, topic, keys=["b0"], index=index).completed == {}
    report = _produce(s, topic, "b0", index)
    assert not report.reused and report.blocks == 12


def test_the_index_down_reads_the_ledger_from_the_start(stack, caplog):
    s = kafka_settings(stack)
    topic = unique_topic("ledger-nodb")
    ensure_topic(s.make_admin(), topic, partitions=2)
    down = PostgresLedgerIndex("postgresql://127.0.0.1:1/nowhere", connect_timeout_s=2)
    with caplog.at_level(logging.WARNING):
        report = _produce(s, topic, "b0", down)
        keyed = read_ledger_records(s, topic, keys=["b0"], index=down)
    assert "ledger index database unreachable" in caplog.text and "from the start" in caplog.text
    got = keyed.completed["b0"]
    assert (got.fingerprint(), got.offsets, got.blocks) == (report.fingerprint(), report.offsets, 12)
    assert keyed.read == 1


def test_the_caches_writes_are_idempotent_and_only_move_forward(pg_url):
    a, b = PostgresLedgerIndex(pg_url), PostgresLedgerIndex(pg_url)
    a.update("L", {"k": (0, 7, b"new"), "t": (0, 8, None)}, {0: 9})
    b.update("L", {"k": (0, 3, b"old"), "t": (0, 2, b"resurrected")}, {0: 4})  # a slower reader, finishing later
    a.update("L", {"k": (0, 7, b"new")}, {0: 9})  # the same read again
    assert b.snapshot("L", ["k", "t", "never"]) == ({0: 9}, {"k": b"new", "t": None})
    assert a.snapshot("other ledger id", ["k"]) == ({}, {})


def test_batches_produced_at_once_each_with_its_own_index_connection_agree_with_a_full_read(stack, pg_url):
    """Four producers at once, each reading and updating the index through its own connection, twice over (the
    second round finds every batch through the index and produces nothing)."""
    s = kafka_settings(stack)
    topic = unique_topic("ledger-concurrent")
    ensure_topic(s.make_admin(), topic, partitions=2)
    keys = [f"b{i}" for i in range(4)]

    def produce(key: str, reports: dict, errors: list) -> None:
        try:
            index = PostgresLedgerIndex(pg_url)
            reports[key] = _produce(s, topic, key, index, seed=int(key[1:]))
            index.close()
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    for round_ in range(2):
        reports: dict[str, object] = {}
        errors: list[BaseException] = []
        threads = [threading.Thread(target=produce, args=(k, reports, errors)) for k in keys]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not errors, errors
        assert all(reports[k].reused == (round_ == 1) for k in keys)
    full = read_ledger_records(s, topic)
    assert sorted(full.completed) == keys
    fresh = PostgresLedgerIndex(pg_url)
    for k in keys:
        via_index = read_ledger_records(s, topic, keys=[k], index=fresh)
        assert _as_json(via_index) == ({k: full.completed[k].to_ledger_json()}, {})
