"""`BatchTransactions` rides out a transaction that an abort clears (a leader moved mid-transaction: librdkafka
purges the queued messages and asks for an epoch bump) by producing the same chunk again, and re-raises what an
abort does not clear. Pure logic: the producer is a stand-in that replays the delivery reports librdkafka gives;
the real broker kill is `reliability/test_broker_kill.py`."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from pipeline_project.streaming.errors import DeliveryError
from pipeline_project.streaming.produce.staging import Chunk, StagedMessage
from pipeline_project.streaming.produce.transactions import BatchTotals, BatchTransactions, abortable

from .kafka_helpers import DeliveredMessage


class StandInProducer:
    """Transactions over an offset per partition; `fail` lists, per transaction, the error its deliveries get."""

    def __init__(self, fail=(), abort_error=None):
        self.fail = list(fail)
        self.abort_error = abort_error
        self.offsets: dict[tuple[str, int], int] = {}
        self.pending: list = []
        self.committed: list[bytes] = []
        self.log: list[str] = []

    def begin_transaction(self):
        self.log.append("begin")
        self.current, self.error = [], (self.fail.pop(0) if self.fail else None)

    def produce(self, topic, value=None, on_delivery=None, partition=None, headers=None, key=None):
        p = 0 if partition is None else partition
        off = self.offsets.get((topic, p), 0)
        self.offsets[(topic, p)] = off + 1
        self.pending.append((on_delivery, DeliveredMessage(topic, p, off, value)))
        self.current.append((topic, value))

    def poll(self, _timeout):
        return 0

    def flush(self, _timeout):
        for cb, msg in self.pending:
            cb(self.error, msg)
        self.pending = []
        return 0

    def commit_transaction(self, _timeout):
        self.log.append("commit")
        self.committed += [v for t, v in self.current if t == "data"]

    def abort_transaction(self, _timeout):
        self.log.append("abort")
        if self.abort_error is not None:
            raise KafkaException(self.abort_error)


def _txs(producer, retries=3) -> BatchTransactions:
    return BatchTransactions(producer, txid="tx", topic="data", ledger_key="b", partitions=[0, 1], start=0,
                             totals=BatchTotals(), flush_timeout_s=1, abortable_retries=retries)  # fmt: skip


CHUNK = Chunk(messages=[StagedMessage(f"m{i}".encode(), [], 2, 0, 0) for i in range(4)], last=True, stream_hash="h")
PURGED = KafkaError(KafkaError._PURGE_QUEUE)


def _record(totals):
    from pipeline_project.streaming.ledger.records import ProgressRecord

    return ProgressRecord(ledger_key="b", content_hash="c", tokenizer_hash="t", seq_len=4, topic_id="id",
                          transactions=totals.transactions, messages=totals.messages, blocks=totals.blocks,
                          bytes=totals.bytes, pad_tokens=0, padded_blocks=0, offsets=totals.offsets,
                          stream_hash="h", transactional_id="tx")  # fmt: skip


def test_a_purged_transaction_is_aborted_and_produced_again_once_committed(monkeypatch):
    monkeypatch.setattr("time.sleep", lambda _s: None)
    producer = StandInProducer(fail=[PURGED, PURGED])
    txs = _txs(producer)
    txs.write_chunk(CHUNK, _record)
    assert producer.log == ["begin", "abort", "begin", "abort", "begin", "commit"]
    assert producer.committed == [m.value for m in CHUNK.messages]  # once, in order
    assert (txs.retried, txs.totals.transactions, txs.totals.messages, txs.totals.blocks) == (2, 1, 4, 8)
    # the committed offsets are the third attempt's (aborted ones stay invisible to read_committed readers)
    assert txs.totals.offsets == {0: (4, 5), 1: (4, 5)}


def test_retries_are_bounded(monkeypatch):
    monkeypatch.setattr("time.sleep", lambda _s: None)
    producer = StandInProducer(fail=[PURGED] * 5)
    with pytest.raises(DeliveryError, match="Purged in queue"):
        _txs(producer, retries=2).write_chunk(CHUNK, _record)
    assert producer.log.count("begin") == 3 and "commit" not in producer.log


@pytest.mark.parametrize(
    "error",
    [KafkaError(KafkaError._MSG_TIMED_OUT), KafkaError(KafkaError.NOT_ENOUGH_REPLICAS), KafkaError(KafkaError._FENCED)],
    ids=["timed-out", "not-enough-replicas", "fenced"],
)
def test_failures_an_abort_does_not_clear_are_raised_at_once(error):
    producer = StandInProducer(fail=[error])
    with pytest.raises(DeliveryError):
        _txs(producer).write_chunk(CHUNK, _record)
    assert producer.log == ["begin", "abort"]


def test_a_failed_abort_is_not_retried():
    producer = StandInProducer(fail=[PURGED], abort_error=KafkaError(KafkaError._FENCED, "fenced", fatal=True))
    with pytest.raises(DeliveryError):
        _txs(producer).write_chunk(CHUNK, _record)
    assert producer.log == ["begin", "abort"]


def test_abortable_reads_librdkafkas_flags():
    epoch_bump = KafkaError(KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER, "requires epoch bump", txn_requires_abort=True)
    assert abortable(KafkaException(epoch_bump))
    assert not abortable(KafkaException(KafkaError(KafkaError._FENCED, "fenced", fatal=True)))
    assert not abortable(KafkaException(KafkaError(KafkaError._TIMED_OUT, "t", retriable=True)))
    assert abortable(DeliveryError("data", 1, PURGED.str(), kafka_error=PURGED))
    assert not abortable(DeliveryError("<pending>", None, "3 messages still undelivered after 1s"))
    assert not abortable(ValueError("not Kafka's"))
