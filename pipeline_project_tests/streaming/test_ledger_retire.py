"""Retiring a ledger entry against the real brokers and PostgreSQL: a partly produced batch whose content changed is
refused until its entry is retired; then it is produced afresh, the audit record stays in the ledger (and its
index), the retired blocks stay accounted for, and the retired content cannot come back."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from pipeline_project.streaming.errors import LedgerConflictError
from pipeline_project.streaming.kafka.topics import ensure_topic, topic_id
from pipeline_project.streaming.ledger.index import PostgresLedgerIndex
from pipeline_project.streaming.ledger.records import (
    LedgerRecords,
    ProgressRecord,
    ledger_topic,
    read_ledger_records,
)
from pipeline_project.streaming.ledger.retire import NothingToRetireError, retire_entry
from pipeline_project.streaming.ledger.retirements import Retirement
from pipeline_project.streaming.produce.producer import produce_blocks
from pipeline_project.streaming.produce.request import ProducerConfig, ProduceRequest

from .kafka_helpers import consume_all, kafka_settings, unique_topic

SEQ = 64
CFG = ProducerConfig(max_message_bytes=SEQ * 4 * 5, transaction_max_bytes=SEQ * 4 * 5 * 3, statistics_interval_ms=0)


class FakeTok:
    name = "unit-tok"
    hash = "deadbeef"


def _blocks(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 129280, size=(n, SEQ), dtype=np.uint32)


def _dies_after(blocks: np.ndarray, n: int):
    for i in range(0, len(blocks), 7):
        if i >= n:
            raise OSError("S3 connection reset")
        yield blocks[i : i + 7]


def _kw(content: str, **kw) -> dict:
    return dict(tokenizer=FakeTok, seq_len=SEQ, source="b1", ledger_key="b1", content_hash=content, config=CFG, **kw)


def _partly_produced(s, topic: str, index=None) -> ProgressRecord:
    with pytest.raises(OSError, match="connection reset"):
        produce_blocks(
            s, ProduceRequest(topic=topic, **_kw("h-A", ledger_index=index)), _dies_after(_blocks(60, seed=1), 40)
        )
    records = read_ledger_records(s, topic, keys=["b1"])
    assert "b1" not in records.completed
    return records.progress["b1"]


@pytest.mark.stack
def test_a_retired_partly_produced_batch_is_produced_afresh_and_audited(stack, pg_url):
    s = kafka_settings(stack)
    topic = unique_topic("retire")
    ensure_topic(s.make_admin(), topic)
    index = PostgresLedgerIndex(pg_url)
    progress = _partly_produced(s, topic, index)
    assert progress.blocks > 0
    new = _blocks(25, seed=2)  # content B: the batch's input now cleans to this
    with pytest.raises(LedgerConflictError, match="pipeline-project ledger retire b1"):
        produce_blocks(s, ProduceRequest(topic=topic, **_kw("h-B", ledger_index=index)), iter([new]))

    (retired,) = retire_entry(s, topic, "b1", "input fixed upstream", operator="tester", index=index)
    assert (retired.kind, retired.content_hash, retired.blocks) == ("progress", "h-A", progress.blocks)
    report = produce_blocks(s, ProduceRequest(topic=topic, **_kw("h-B", ledger_index=index)), iter([new]))
    assert (report.blocks, report.resumed_blocks, report.retired_blocks) == (25, 0, progress.blocks)

    # Kafka (read from offset 0) and the PostgreSQL index agree: the new entry, no progress, the audit record
    ledger_id = topic_id(s.make_admin(), ledger_topic(topic), 10)
    _, cached = index.snapshot(ledger_id, ["b1", "b1#progress", "b1#retired"])
    assert cached["b1#progress"] is None and "b1" not in cached  # the tombstone, indexed by retire_entry itself
    assert json.loads(cached["b1#retired"])["retirements"][0]["reason"] == "input fixed upstream"
    for idx in (None, index):
        records = read_ledger_records(s, topic, keys=["b1"], index=idx)
        assert records.completed["b1"].content_hash == "h-B" and "b1" not in records.progress
        (audit,) = records.retired["b1"]
        assert (audit.reason, audit.operator, audit.content_hash) == ("input fixed upstream", "tester", "h-A")
        assert audit.offsets == progress.offsets
    _, cached = index.snapshot(ledger_id, ["b1", "b1#progress"])
    assert cached["b1#progress"] is None and json.loads(cached["b1"])["content_hash"] == "h-B"
    # every block in the topic is accounted for: the completion record's, or the retirement's
    assert len(consume_all(s, topic)) == report.messages + progress.messages
    # content A cannot come back under the key: its committed blocks are still in the topic
    with pytest.raises(LedgerConflictError, match="was retired"):
        produce_blocks(s, ProduceRequest(topic=topic, **_kw("h-A")), _dies_after(_blocks(60, seed=1), 100))
    index.close()


@pytest.mark.stack
def test_a_completed_entry_is_retired_through_the_cli(stack, monkeypatch):
    from pipeline_project.cli.app import app

    s = kafka_settings(stack)
    topic = unique_topic("retire-cli")
    ensure_topic(s.make_admin(), topic)
    first = produce_blocks(s, ProduceRequest(topic=topic, **_kw("h-A")), iter([_blocks(10, seed=3)]))
    monkeypatch.setenv("PIPELINE_KAFKA_BOOTSTRAP", stack.kafka_bootstrap)
    runner = CliRunner()
    shown = runner.invoke(app, ["ledger", "show", "b1", "--topic", topic])
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.output)["state"] == "completed"
    no_reason = runner.invoke(app, ["ledger", "retire", "b1", "--topic", topic, "--reason", " "])
    assert no_reason.exit_code == 1 and "needs a reason" in no_reason.output
    done = runner.invoke(app, ["ledger", "retire", "b1", "--topic", topic, "--reason", "re-cleaned"])
    assert done.exit_code == 0 and "retired the completed entry of b1" in done.output, done.output
    after = json.loads(runner.invoke(app, ["ledger", "show", "b1", "--topic", topic]).output)
    assert after["state"] == "retired" and after["blocks_in_topic"] == {"entry": 0, "retired": first.blocks}
    again = runner.invoke(app, ["ledger", "retire", "b1", "--topic", topic, "--reason", "twice"])
    assert again.exit_code == 1 and "nothing to retire" in again.output
    second = produce_blocks(s, ProduceRequest(topic=topic, **_kw("h-B")), iter([_blocks(4, seed=4)]))
    assert not second.reused and second.blocks == 4 and second.retired_blocks == first.blocks
    with pytest.raises(NothingToRetireError):
        retire_entry(s, unique_topic("none"), "b1", "nothing there")


@pytest.mark.stack
def test_a_resume_under_another_transactional_id_is_refused(stack):
    """A changed transactional_id_prefix between attempts would leave the first attempt's zombie unfenced."""
    s = kafka_settings(stack)
    topic = unique_topic("txid")
    ensure_topic(s.make_admin(), topic)
    progress = _partly_produced(s, topic)
    other = kafka_settings(stack, transactional_id_prefix="elsewhere")
    with pytest.raises(LedgerConflictError, match="transactional id"):
        produce_blocks(other, ProduceRequest(topic=topic, **_kw("h-A")), _dies_after(_blocks(60, seed=1), 100))
    assert len(consume_all(s, topic)) == progress.messages  # nothing produced


def test_a_cache_that_missed_the_retirement_tombstones_still_decides_as_the_ledger_does():
    """Compaction may drop a tombstone before a stale index reads it: the audit record alone retires the entry."""
    stale = ProgressRecord(ledger_key="b1", content_hash="h-A", tokenizer_hash="t", seq_len=SEQ, topic_id="T",
                           transactions=1, messages=1, blocks=5, bytes=1, pad_tokens=0, padded_blocks=0,
                           offsets={0: (0, 0)}, stream_hash="s", transactional_id="tx")  # fmt: skip
    record = {"content_hash": "h-A", "tokenizer_hash": "t", "seq_len": SEQ, "topic_id": "T", "blocks": 9}
    retired = Retirement("progress", record, "r", "op")
    records = LedgerRecords(completed={}, progress={"b1": stale}, retired={"b1": [retired]})
    records.drop_retired()
    assert records.progress == {}
    other_topic = LedgerRecords(completed={}, progress={"b1": stale}, retired={"b1": [Retirement(
        "progress", {**record, "topic_id": "older"}, "r", "op")]})  # fmt: skip
    other_topic.drop_retired()
    assert "b1" in other_topic.progress  # a retirement in a deleted incarnation of the topic retires nothing here


@pytest.mark.stack
def test_retiring_fences_the_transactional_id_the_entry_was_written_under(stack):
    """The operator's retire runs with the default prefix; the batch was produced under another one, whose zombie
    still holds an open transaction: retiring fences it too, so it cannot commit after the retirement."""
    from confluent_kafka import KafkaException

    from pipeline_project.streaming.kafka.client import transactional_id_for

    s, other = kafka_settings(stack), kafka_settings(stack, transactional_id_prefix="elsewhere")
    topic = unique_topic("fence")
    ensure_topic(s.make_admin(), topic)
    progress = _partly_produced(other, topic)
    zombie = other.make_transactional_producer(transactional_id_for(other, topic, "b1"))
    zombie.begin_transaction()
    zombie.produce(topic, value=b"zombie", partition=0)
    zombie.flush(10)
    (retired,) = retire_entry(s, topic, "b1", "moved to another prefix", operator="tester")
    assert retired.record["transactional_id"] == "elsewhere." + topic + ".b1"
    with pytest.raises(KafkaException):
        zombie.commit_transaction(10)
    values = [m.value() for m in consume_all(s, topic)]
    assert b"zombie" not in values and len(values) == progress.messages


def test_what_cleaning_refuses_is_what_the_producer_would_refuse():
    from pipeline_project.streaming.ledger.checks import refusal_for_content

    progress = ProgressRecord(ledger_key="b1", content_hash="h-A", tokenizer_hash="t", seq_len=SEQ, topic_id="T",
                              transactions=1, messages=1, blocks=5, bytes=1, pad_tokens=0, padded_blocks=0,
                              offsets={0: (0, 0)}, stream_hash="s", transactional_id="tx")  # fmt: skip
    partly = LedgerRecords(completed={}, progress={"b1": progress})
    assert "partly produced (5 blocks committed)" in refusal_for_content(partly, "b1", "h-B")
    assert refusal_for_content(partly, "b1", "h-A") is None  # the same content: token_blocks resumes it
    retired = LedgerRecords(completed={}, progress={}, retired={"b1": [Retirement(
        "progress", {"content_hash": "h-A", "topic_id": "T", "blocks": 5}, "changed", "op")]})  # fmt: skip
    assert "was retired" in refusal_for_content(retired, "b1", "h-A")
    assert refusal_for_content(retired, "b1", "h-B") is None
    assert refusal_for_content(LedgerRecords(completed={}, progress={}), "b1", "h-B") is None
