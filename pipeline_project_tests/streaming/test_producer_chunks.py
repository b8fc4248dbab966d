"""Bounded transactions against the real brokers: a batch interrupted after some committed chunks (an exception, or
a SIGKILL inside an open transaction) resumes exactly; produce_blocks returns only once read_committed readers see
the batch; a data topic recreated under a kept ledger is a conflict, not a silent reuse."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import xxhash

from pipeline_project.streaming.errors import LedgerConflictError, VisibilityTimeoutError
from pipeline_project.streaming.kafka.format import decode_message, read_header
from pipeline_project.streaming.kafka.topics import ensure_topic
from pipeline_project.streaming.ledger.records import read_ledger, read_ledger_records
from pipeline_project.streaming.produce.producer import produce_blocks
from pipeline_project.streaming.produce.request import ProducerConfig, ProduceRequest
from pipeline_project.streaming.produce.verify import verify_produced

from .kafka_helpers import consume_all, kafka_settings, last_stable_offsets, recreate_topic, unique_topic

pytestmark = pytest.mark.stack

SEQ = 64
# 5 blocks a message, 3 messages a transaction: 203 blocks are 41 messages in 14 transactions
CFG = ProducerConfig(max_message_bytes=SEQ * 4 * 5, transaction_max_bytes=SEQ * 4 * 5 * 3, statistics_interval_ms=0)
N_BLOCKS = 203


class FakeTok:
    name = "unit-tok"
    hash = "deadbeef"


def _blocks(n: int = N_BLOCKS, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 129280, size=(n, SEQ), dtype=np.uint32)


def _pieces(blocks: np.ndarray, size: int = 7):
    for i in range(0, len(blocks), size):
        yield blocks[i : i + size]


def _kw(key: str) -> dict:
    return dict(tokenizer=FakeTok, seq_len=SEQ, source=key, ledger_key=key, content_hash="h-" + key, config=CFG)


def _stream(settings, topic: str, key: str) -> np.ndarray:
    """The batch's blocks read back read_committed, in produce order: message i went to partition (start + i) % P."""
    msgs = [
        m
        for m in consume_all(settings, topic)
        if read_header(m.headers(), topic=topic, partition=m.partition(), offset=m.offset()).source == key
    ]
    parts = sorted(settings.make_admin().list_topics(topic=topic, timeout=10).topics[topic].partitions)
    per = {p: sorted((m for m in msgs if m.partition() == p), key=lambda m: m.offset()) for p in parts}
    start = xxhash.xxh64_intdigest(key.encode()) % len(parts)
    out = []
    for i in range(len(msgs)):
        m = per[parts[(start + i) % len(parts)]].pop(0)  # IndexError: a message missing or duplicated somewhere
        out.append(decode_message(m.value(), m.headers(), topic=topic, partition=m.partition(), offset=m.offset()))
    assert not any(per.values()), "messages left over: the round robin does not add up"
    return np.concatenate(out)


def _hashes(blocks: np.ndarray) -> list[int]:
    return [xxhash.xxh64_intdigest(b.tobytes()) for b in blocks]


def _assert_complete_and_exact(s, topic, key, report, reference) -> None:
    assert (report.blocks, report.messages) == (N_BLOCKS, 41) and not report.reused
    got = _stream(s, topic, key)
    assert _hashes(got) == _hashes(_blocks())  # every block once, in the uninterrupted run's order
    assert report.transactions == reference.transactions == 14
    assert report.stream_hash == reference.stream_hash
    for m in consume_all(s, topic):  # the completion record's offsets cover every chunk, old and new
        first, last = report.offsets[m.partition()]
        assert first <= m.offset() <= last
    assert verify_produced(s, report)["blocks"] == N_BLOCKS
    records = read_ledger_records(s, topic)
    assert key in records.completed and key not in records.progress  # the progress record is tombstoned
    again = produce_blocks(s, ProduceRequest(topic=topic, **_kw(key)), iter(()))
    assert again.reused and again.offsets == report.offsets


@pytest.fixture
def reference(stack):
    """The uninterrupted run, in its own topic."""
    s = kafka_settings(stack)
    topic = unique_topic("ref")
    ensure_topic(s.make_admin(), topic)
    report = produce_blocks(s, ProduceRequest(topic=topic, **_kw("b1")), _pieces(_blocks()))
    assert report.messages == 41
    assert _hashes(_stream(s, topic, "b1")) == _hashes(_blocks())
    return report


def test_a_run_that_fails_after_some_chunks_is_resumed_exactly(stack, reference):
    s = kafka_settings(stack)
    topic = unique_topic("resume")
    ensure_topic(s.make_admin(), topic)

    def dies_after(n):
        yielded = 0
        for piece in _pieces(_blocks()):
            if yielded >= n:
                raise OSError("S3 connection reset")
            yield piece
            yielded += len(piece)

    with pytest.raises(OSError, match="connection reset"):
        produce_blocks(s, ProduceRequest(topic=topic, **_kw("b1")), dies_after(100))
    # 105 blocks were read: chunks 1..6 (90 blocks) staged, each with one message of look-ahead, and committed
    assert len(consume_all(s, topic)) == 18
    assert len(consume_all(s, topic, isolation="read_uncommitted")) == 18  # nothing produced outside a commit
    assert "b1" not in read_ledger(s, topic)  # not complete: nothing reports the batch yet
    progress = read_ledger_records(s, topic).progress["b1"]
    assert (progress.transactions, progress.blocks, progress.messages) == (6, 90, 18)

    report = produce_blocks(s, ProduceRequest(topic=topic, **_kw("b1")), _pieces(_blocks()))
    assert report.resumed_blocks == 90
    _assert_complete_and_exact(s, topic, "b1", report, reference)


KILLED_RUN = """
import os, signal, sys
from pipeline_project.streaming.kafka.client import KafkaSettings
from pipeline_project.streaming.produce.producer import produce_blocks
from pipeline_project.streaming.produce.request import ProduceRequest
from pipeline_project_tests.streaming.test_producer_chunks import _blocks, _kw, _pieces

make = KafkaSettings.make_transactional_producer


class DiesAtThirdCommit:
    # the third transaction's messages and ledger record are produced and flushed, still open: die
    def __init__(self, inner):
        self.inner, self.commits = inner, 0

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def commit_transaction(self, *args):
        self.commits += 1
        if self.commits == 3:
            os.kill(os.getpid(), signal.SIGKILL)
        return self.inner.commit_transaction(*args)


KafkaSettings.make_transactional_producer = lambda self, *a, **k: DiesAtThirdCommit(make(self, *a, **k))
settings = KafkaSettings(bootstrap_servers=sys.argv[1])
produce_blocks(settings, ProduceRequest(topic=sys.argv[2], **_kw("b1")), _pieces(_blocks()))
"""


def test_a_run_killed_inside_a_transaction_is_fenced_and_resumed_exactly(stack, reference, tmp_path):
    s = kafka_settings(stack)
    topic = unique_topic("killed")
    ensure_topic(s.make_admin(), topic)
    script = tmp_path / "killed_run.py"
    script.write_text(textwrap.dedent(KILLED_RUN))
    repo = Path(__file__).resolve().parents[2]
    proc = subprocess.run(
        [sys.executable, str(script), s.bootstrap_servers, topic],
        env={**os.environ, "PYTHONPATH": str(repo)},
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == -9, proc.stderr[-2000:]
    assert len(consume_all(s, topic)) == 6  # two chunks committed
    assert len(consume_all(s, topic, isolation="read_uncommitted")) == 9  # the third is in the zombie's open tx

    report = produce_blocks(
        s, ProduceRequest(topic=topic, **_kw("b1")), _pieces(_blocks())
    )  # same transactional.id: fences the zombie
    assert report.resumed_blocks == 30
    _assert_complete_and_exact(s, topic, "b1", report, reference)


def test_returns_only_once_read_committed_readers_see_the_batch(stack, monkeypatch):
    from pipeline_project.streaming.produce import producer

    s = kafka_settings(stack)
    topic = unique_topic("visible")
    ensure_topic(s.make_admin(), topic, partitions=1)
    # another producer's open transaction, begun before ours, holds the partition's last stable offset back
    other = s.make_transactional_producer("test-other-" + topic)
    other.begin_transaction()
    other.produce(topic, value=b"other", partition=0)
    other.flush(30)
    # it ends 1.5 s after our batch has committed and begun to wait, however long our setup took (a fixed timer
    # from the start could expire during a slow setup on a loaded machine, leaving nothing to wait for)
    waiting = threading.Event()
    wait = producer.wait_until_visible

    def signalled_wait(*args, **kwargs):
        waiting.set()
        return wait(*args, **kwargs)

    monkeypatch.setattr(producer, "wait_until_visible", signalled_wait)

    def end_other() -> None:
        if waiting.wait(120):
            time.sleep(1.5)
        other.commit_transaction(30)

    ends = threading.Thread(target=end_other)
    ends.start()
    t0 = time.monotonic()
    try:
        report = produce_blocks(s, ProduceRequest(topic=topic, **_kw("v1")), [_blocks(12)])
        waited = time.monotonic() - t0
        stable = last_stable_offsets(s, topic, [0])[0]
    finally:
        waiting.set()
        ends.join()
    assert waited > 1.5
    assert stable > report.offsets[0][1]  # right on return, a read_committed reader sees the whole batch
    assert report.stage_seconds["visible"] > 1.0

    stuck = s.make_transactional_producer("test-stuck-" + topic)
    stuck.begin_transaction()
    stuck.produce(topic, value=b"stuck", partition=0)
    stuck.flush(30)
    try:
        with pytest.raises(VisibilityTimeoutError, match=rf"{topic}\[0\] last stable offset \d+, written up to"):
            produce_blocks(s, ProduceRequest(topic=topic, **{**_kw("v2"), "config": CFG.model_copy(
                update={"visibility_timeout_s": 2.0})}), [_blocks(4, seed=1)])  # fmt: skip
    finally:
        stuck.abort_transaction(30)
    assert produce_blocks(
        s, ProduceRequest(topic=topic, **_kw("v2")), [_blocks(4, seed=1)]
    ).reused  # it was committed all along


def test_a_topic_recreated_under_a_kept_ledger_is_a_conflict_not_a_silent_reuse(stack):
    s = kafka_settings(stack)
    topic = unique_topic("recreated")
    ensure_topic(s.make_admin(), topic, partitions=2)
    first = produce_blocks(s, ProduceRequest(topic=topic, **_kw("r1")), [_blocks(6)])
    recreate_topic(s, topic, partitions=2)  # the blocks are gone; the ledger topic is not
    with pytest.raises(LedgerConflictError, match="deleted and recreated") as info:
        produce_blocks(s, ProduceRequest(topic=topic, **_kw("r1")), [_blocks(6)])
    assert first.topic_id and f"topic id {first.topic_id}" in str(info.value)
    assert consume_all(s, topic) == []


def test_the_ledger_is_read_to_its_high_watermark_so_a_retry_never_misses_a_committed_batch(stack, monkeypatch):
    import threading

    from pipeline_project.streaming.errors import ReadTimeoutError
    from pipeline_project.streaming.ledger.records import ledger_topic
    from pipeline_project.streaming.produce import producer as producer_module

    s = kafka_settings(stack)
    topic = unique_topic("ledger-hw")
    ensure_topic(s.make_admin(), topic, partitions=2)
    produce_blocks(s, ProduceRequest(topic=topic, **_kw("warm-up")), [_blocks(2)])  # the ledger topic exists
    other = s.make_transactional_producer("test-other-ledger-" + topic)
    ledger_read = threading.Event()
    real_read = producer_module.read_ledger_records

    def read_then_signal(*args, **kwargs):
        try:
            return real_read(*args, **kwargs)
        finally:
            ledger_read.set()

    monkeypatch.setattr(producer_module, "read_ledger_records", read_then_signal)

    def blocks_while_another_batch_begins():
        # the input is read ahead while the producer connects; once k1 has read the ledger, another batch's
        # transaction opens on the ledger partition, so k1's ledger record commits behind that open
        # transaction: above the last stable offset until it ends
        blocks = _blocks(10, seed=2)
        yield blocks[:5]
        assert ledger_read.wait(30)
        other.begin_transaction()
        other.produce(ledger_topic(topic), key=b"other", value=b"{}")
        other.flush(30)
        yield blocks[5:]

    quick = CFG.model_copy(update={"visibility_timeout_s": 1.0, "ledger_read_timeout_s": 3.0})
    try:
        with pytest.raises(VisibilityTimeoutError, match=r"\.ledger\[0\]"):
            produce_blocks(
                s, ProduceRequest(topic=topic, **{**_kw("k1"), "config": quick}), blocks_while_another_batch_begins()
            )
        # k1 is committed. A retry that read the ledger only up to the LSO would miss it and produce it twice;
        # it reads to the high watermark instead, and says why when it cannot get there
        with pytest.raises(ReadTimeoutError, match="high watermark"):
            produce_blocks(s, ProduceRequest(topic=topic, **{**_kw("k1"), "config": quick}), [_blocks(10, seed=2)])
    finally:
        other.abort_transaction(30)
    again = produce_blocks(s, ProduceRequest(topic=topic, **_kw("k1")), [_blocks(10, seed=2)])
    assert again.reused
    assert _hashes(_stream(s, topic, "k1")) == _hashes(_blocks(10, seed=2))  # once, not twice
