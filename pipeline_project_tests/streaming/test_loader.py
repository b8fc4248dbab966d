"""The Kafka -> torch loader against the real brokers of the local stack."""

from __future__ import annotations

import json
import threading
import time

import numpy as np
import pytest
import torch
from confluent_kafka import Producer

from pipeline_project.streaming.errors import DeadLetterLimitError
from pipeline_project.streaming.kafka.client import KafkaSettings
from pipeline_project.streaming.kafka.format import FORMAT_VERSION, MalformedMessageError, encode_message
from pipeline_project.streaming.load.loader import KafkaBlockLoader, LoaderConfig
from pipeline_project_tests.streaming.test_loader_support import (
    SEQ_LEN,
    TOKENIZER_HASH,
    make_topic,
    produce,
    produce_raw,
    wait_until_committed_visible,
)

pytestmark = pytest.mark.stack


@pytest.fixture(scope="module")
def kafka(stack) -> KafkaSettings:
    return KafkaSettings.from_settings(stack)


@pytest.fixture(scope="module")
def topic4(kafka):
    """4 partitions, two committed transactions and one aborted one in between."""
    data = make_topic(kafka, 4)
    produce(kafka, data, 6, seed=1)
    produce(kafka, data, 3, seed=2, abort=True)
    produce(kafka, data, 6, seed=3)
    return data


def _cfg(kafka, data, **kw) -> LoaderConfig:
    base = dict(
        kafka=kafka,
        topic=data.topic,
        seq_len=SEQ_LEN,
        batch_size=5,
        rank=0,
        world_size=1,
        expected_tokenizer_hash=TOKENIZER_HASH,
        trace=True,
        idle_timeout_s=10.0,
        seed=11,
    )
    return LoaderConfig(**{**base, **kw})


def _run(cfg, state=None, max_batches=None):
    loader = KafkaBlockLoader(cfg)
    if state is not None:
        loader.load_state_dict(state)
    batches = []
    for batch in loader:
        batches.append(batch.clone())
        if max_batches is not None and len(batches) == max_batches:
            break
    out = (batches, list(loader.trace), loader.state_dict(), loader.metrics())
    loader.close()
    return out


def test_bounded_delivers_every_committed_block_once_with_matching_rows(kafka, topic4):
    batches, trace, state, metrics = _run(_cfg(kafka, topic4, num_workers=2))
    assert all(b.dtype == torch.int64 and b.shape == (5, SEQ_LEN) for b in batches)
    assert len(trace) == len(set(trace)) == 5 * len(batches)
    assert set(trace) <= set(topic4.blocks)  # aborted blocks never show up
    missing = set(topic4.blocks) - set(trace)
    assert len(missing) < 5  # only the dropped short last batch
    rows = torch.cat(batches).numpy()
    expected = np.stack([topic4.expected_row(k) for k in trace])
    np.testing.assert_array_equal(rows, expected)
    # per partition, blocks arrive in log order
    for p in range(4):
        seq = [(o, b) for q, o, b in trace if q == p]
        assert seq == sorted(seq)
    assert metrics["blocks_delivered"] == len(trace)
    assert metrics["tokens_delivered"] == len(trace) * SEQ_LEN
    assert 0.0 <= metrics["data_wait_fraction"] <= 1.0
    assert set(metrics["lag"]) == {0, 1, 2, 3}
    assert metrics["lag_total"] == sum(metrics["lag"].values())
    assert json.loads(json.dumps(state)) == state


@pytest.mark.parametrize(("num_workers", "k"), [(1, 1), (1, 4), (2, 3), (3, 7)])
def test_kill_and_resume_gives_the_identical_sequence(kafka, topic4, num_workers, k):
    cfg = _cfg(kafka, topic4, num_workers=num_workers)
    full_batches, full_trace, _, _ = _run(cfg)
    head_batches, head_trace, state, _ = _run(cfg, max_batches=k)
    state = json.loads(json.dumps(state))  # as saved in a checkpoint
    tail_batches, tail_trace, _, _ = _run(cfg, state=state)
    assert head_trace + tail_trace == full_trace
    for a, b in zip(head_batches + tail_batches, full_batches, strict=True):
        assert torch.equal(a, b)


def test_state_holds_partial_block_cursors_and_resume_continues_inside_the_message(kafka, topic4):
    cfg = _cfg(kafka, topic4, batch_size=3)
    loader = KafkaBlockLoader(cfg)
    seen_partial = None
    for _ in loader:
        state = loader.state_dict()
        partial = {p: c for p, c in state["partitions"].items() if c["block"] > 0}
        if partial:
            seen_partial = state
            break
    loader.close()
    assert seen_partial is not None, "with 1-4 blocks per message and batch 3, some batch must cut a message"
    p, c = next(iter({p: c for p, c in seen_partial["partitions"].items() if c["block"] > 0}.items()))
    assert seen_partial["current"] == int(p)
    _, tail_trace, _, _ = _run(cfg, state=seen_partial, max_batches=1)
    assert tail_trace[0] == (int(p), c["offset"], c["block"])


def test_resume_is_a_seek_not_a_replay(kafka, topic4):
    cfg = _cfg(kafka, topic4)
    _, _head_trace, state, _ = _run(cfg, max_batches=6)
    loader = KafkaBlockLoader(cfg)
    loader.load_state_dict(state)
    # without iterating, the first fetch of every partition starts at the saved offset
    loader._start()
    try:
        for r in loader.source.readers:
            assigned = {tp.partition: tp.offset for tp in r.consumer.assignment()}
            for p, off in assigned.items():
                assert off == state["partitions"][str(p)]["offset"]
    finally:
        loader.close()


def test_the_fixtures_wait_holds_while_a_transaction_is_open(kafka):
    """`produce` waits until its commit markers are visible before the tests capture end offsets: the wait must
    compare the last stable offset with the high watermark, not with itself (a read_committed consumer's
    watermark is the LSO, so the wait returned at once and, under load, a loader missed a transaction)."""
    data = make_topic(kafka, 1)
    producer = Producer(kafka.transactional_producer_config(f"test-{data.topic}"))
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(data.topic, value=b"x", partition=0)
    producer.flush(30)
    with pytest.raises(AssertionError, match="commit markers not visible"):
        wait_until_committed_visible(kafka, data, timeout_s=1.0)
    producer.commit_transaction(30)
    wait_until_committed_visible(kafka, data)


def test_bounded_stops_at_the_end_captured_at_start(kafka):
    data = make_topic(kafka, 2)
    before = set(produce(kafka, data, 5))
    loader = KafkaBlockLoader(_cfg(kafka, data, batch_size=1))
    ends = loader.end_offsets
    after = set(produce(kafka, data, 5))
    delivered = []
    for _ in loader:
        pass
    delivered = set(loader.trace)
    metrics = loader.metrics()
    loader.close()
    assert delivered == before
    assert not delivered & after
    assert all(o < ends[p] for p, o, _ in delivered)
    # the end offset lies past the commit marker; the state reaches it and nothing is left
    assert {int(p): c["offset"] for p, c in loader.state_dict()["partitions"].items()} == ends
    assert metrics["lag_total"] >= len({(p, o) for p, o, _ in after})


def test_explicit_end_offsets_bound_the_run(kafka, topic4):
    cut = {p: 3 for p in range(4)}
    _, trace, _, _ = _run(_cfg(kafka, topic4, batch_size=1, end_offsets=cut))
    assert trace and all(o < 3 for _, o, _ in trace)
    assert set(trace) == {k for k in topic4.blocks if k[1] < 3}


def test_streaming_picks_up_blocks_produced_after_start(kafka):
    data = make_topic(kafka, 2)
    first = set(produce(kafka, data, 4))
    loader = KafkaBlockLoader(_cfg(kafka, data, mode="streaming", batch_size=1, idle_timeout_s=6.0))
    later: set = set()
    got = []

    def produce_later():
        time.sleep(2.0)
        later.update(produce(kafka, data, 4))

    t = threading.Thread(target=produce_later)
    t.start()
    for _ in loader:
        got.append(loader.trace[-1])
    t.join()
    loader.close()
    assert later
    assert set(got) == first | later
    assert len(got) == len(set(got))


def _bad_message(problem: str) -> tuple[bytes, list, str]:
    good = (np.arange(2 * SEQ_LEN, dtype=np.uint32)).reshape(2, SEQ_LEN)
    value, headers = encode_message(good, tokenizer_name="test", tokenizer_hash=TOKENIZER_HASH, source="t")
    if problem == "length":
        return value[:-4], headers, "bytes, expected"
    if problem == "tokenizer_hash":
        value, headers = encode_message(good, tokenizer_name="test", tokenizer_hash="other", source="t")
        return value, headers, "tokenizer hash other"
    headers = [(k, str(FORMAT_VERSION + 98).encode() if k == "fmt" else v) for k, v in headers]
    return value, headers, f"unknown format version {FORMAT_VERSION + 98}"


@pytest.mark.parametrize("problem", ["length", "tokenizer_hash", "format_version"])
def test_malformed_message_is_skipped_into_a_dead_letter_and_training_goes_on(kafka, problem):
    data = make_topic(kafka, 1)
    before = produce(kafka, data, 2)
    value, headers, reason = _bad_message(problem)
    bad_offset = produce_raw(kafka, data.topic, 0, value, headers)
    after = produce(kafka, data, 2)
    loader = KafkaBlockLoader(_cfg(kafka, data, batch_size=1))
    states = []
    for _ in loader:
        states.append(loader.state_dict())
    metrics = loader.metrics()
    loader.close()
    assert loader.trace == before + after  # every good block, before and after it, in order
    assert metrics["dead_letters"] == 1
    (letter,) = loader.dead_letters
    assert (letter.topic, letter.partition, letter.offset) == (data.topic, 0, bad_offset)
    assert reason in letter.reason
    assert set(letter.as_dict()) == {"topic", "partition", "offset", "reason"}
    # the position moved past it: resuming from the state after the first block behind it does not meet it again
    resume_at = next(st for st, key in zip(states, loader.trace) if key[1] > bad_offset)
    again = KafkaBlockLoader(_cfg(kafka, data, batch_size=1))
    again.load_state_dict(resume_at)
    rest = [key for _ in again for key in again.trace[-1:]]
    assert again.metrics()["dead_letters"] == 0 and rest == after[1:]
    again.close()


def test_too_many_dead_letters_stop_the_loader(kafka):
    data = make_topic(kafka, 1)
    produce(kafka, data, 1)
    value, headers, _ = _bad_message("tokenizer_hash")
    bad_offset = produce_raw(kafka, data.topic, 0, value, headers)
    loader = KafkaBlockLoader(_cfg(kafka, data, batch_size=1, max_dead_letters=0))
    with pytest.raises(DeadLetterLimitError, match="max_dead_letters") as info:
        for _ in loader:
            pass
    loader.close()
    cause = info.value.__cause__
    assert isinstance(cause, MalformedMessageError) and (cause.partition, cause.offset) == (0, bad_offset)
    assert f"{data.topic}[0]@{bad_offset}" in str(info.value)


def test_dead_letters_are_produced_to_the_dead_letter_topic(kafka):
    from pipeline_project.streaming.load.loader import dead_letter_topic_for

    from .kafka_helpers import consume_all

    data = make_topic(kafka, 1)
    produce(kafka, data, 1)
    value, headers, reason = _bad_message("length")
    bad_offset = produce_raw(kafka, data.topic, 0, value, headers)
    dlq = dead_letter_topic_for(data.topic)
    with KafkaBlockLoader(_cfg(kafka, data, batch_size=1, dead_letter_topic=dlq)) as loader:
        assert len(list(loader)) == len(data.blocks)
    (msg,) = consume_all(kafka, dlq)
    h = dict(msg.headers())
    assert msg.key() == f"{data.topic}/0/{bad_offset}".encode() and msg.value() == value
    assert (h["dlq.topic"], h["dlq.partition"], h["dlq.offset"]) == (
        data.topic.encode(),
        b"0",
        str(bad_offset).encode(),
    )
    assert reason in h["dlq.reason"].decode()


def test_state_of_another_topic_is_rejected(kafka, topic4):
    from pipeline_project.streaming.load.state import StateError

    _, _, state, _ = _run(_cfg(kafka, topic4), max_batches=1)
    loader = KafkaBlockLoader(_cfg(kafka, topic4))
    with pytest.raises(StateError, match="is for topic"):
        loader.load_state_dict({**state, "topic": "elsewhere"})
    loader.close()
