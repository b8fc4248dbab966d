"""Loss paths between the topic and the trainer, against the real brokers: retention deleting blocks a saved position
still needs, a deleted and recreated topic, and the padded tail of a batch reaching the train loop intact."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest
import torch
from confluent_kafka import TopicPartition

from pipeline_project.streaming.errors import DataLossError, TopicLayoutMismatchError, TopicRecreatedError
from pipeline_project.streaming.kafka.client import KafkaSettings
from pipeline_project.streaming.kafka.format import PAD_TOKEN
from pipeline_project.streaming.kafka.topics import ensure_topic
from pipeline_project.streaming.load.loader import KafkaBlockLoader, LoaderConfig
from pipeline_project.streaming.produce.request import ProduceRequest
from pipeline_project.streaming.produce.tokenize import tokenize_and_produce
from pipeline_project_tests.streaming.kafka_helpers import recreate_topic, unique_topic
from pipeline_project_tests.streaming.test_loader_support import (
    SEQ_LEN,
    TOKENIZER_HASH,
    make_topic,
    produce,
)

pytestmark = pytest.mark.stack

WEEK_MS = 7 * 24 * 3600 * 1000


@pytest.fixture(scope="module")
def kafka(stack) -> KafkaSettings:
    return KafkaSettings.from_settings(stack)


def _cfg(kafka, topic, **kw) -> LoaderConfig:
    base = dict(kafka=kafka, topic=topic, seq_len=SEQ_LEN, batch_size=2, rank=0, world_size=1,
                expected_tokenizer_hash=TOKENIZER_HASH, trace=True, idle_timeout_s=10.0, seed=3)  # fmt: skip
    return LoaderConfig(**{**base, **kw})


def _topic_config(kafka, name) -> dict[str, str]:
    from confluent_kafka.admin import ConfigResource

    res = ConfigResource(ConfigResource.Type.TOPIC, name)
    admin = kafka.make_admin()  # held until the future resolves
    return {k: e.value for k, e in admin.describe_configs([res])[res].result(timeout=30).items()}


def _delete_below(kafka, topic, partition, offset) -> None:
    admin = kafka.make_admin()
    for fut in admin.delete_records([TopicPartition(topic, partition, offset)]).values():
        fut.result(timeout=30)


def _head_state(kafka, data, batches=2):
    loader = KafkaBlockLoader(_cfg(kafka, data.topic))
    for i, _ in enumerate(loader, 1):
        if i == batches:
            break
    state, trace = loader.state_dict(), list(loader.trace)
    loader.close()
    return json.loads(json.dumps(state)), trace


# -- retention --------------------------------------------------------------------------------


def test_topics_keep_blocks_forever_unless_told_otherwise(kafka):
    name = unique_topic("retention")
    layout = ensure_topic(kafka.make_admin(), name, partitions=1)
    cfg = _topic_config(kafka, name)
    assert (cfg["retention.ms"], cfg["retention.bytes"]) == ("-1", "-1")  # not the broker's 7 days
    assert layout.config["retention.ms"] == "-1"


def test_an_existing_topic_with_a_shorter_retention_is_a_layout_mismatch(kafka, caplog):
    admin = kafka.make_admin()
    name = unique_topic("week")
    ensure_topic(admin, name, partitions=1, config={"retention.ms": WEEK_MS})  # as made before retention was explicit
    with pytest.raises(TopicLayoutMismatchError, match=f"retention.ms expected -1, actual {WEEK_MS}") as info:
        ensure_topic(admin, name, partitions=1)
    assert "kafka-configs --alter" in str(info.value) and "retention.ms=-1" in str(info.value)
    # asking for less than the topic keeps is no loss: a warning, not an error
    with caplog.at_level(logging.WARNING):
        ensure_topic(admin, name, partitions=1, config={"retention.ms": WEEK_MS // 7})
    assert "keeps data longer than asked" in caplog.text


# -- saved cursors below the log start offset -------------------------------------------------


def test_a_cursor_below_the_log_start_is_a_clear_error_naming_what_was_lost(kafka):
    data = make_topic(kafka, 2)
    produce(kafka, data, 6, seed=4)
    state, head = _head_state(kafka, data)
    cursor = state["partitions"]["0"]["offset"]
    _delete_below(kafka, data.topic, 0, cursor + 3)  # retention (or delete-records) removed unread blocks
    loader = KafkaBlockLoader(_cfg(kafka, data.topic))
    with pytest.raises(DataLossError, match=rf"\[0\] offsets \[{cursor}, {cursor + 3}\) \(3 offsets\)") as info:
        loader.load_state_dict(state)
    loader.close()
    assert info.value.lost == {0: (cursor, cursor + 3)} and info.value.lost_offsets == 3
    assert "allow_data_loss" in str(info.value)

    # opting in skips them, loudly, and counts them
    loader = KafkaBlockLoader(_cfg(kafka, data.topic, allow_data_loss=True))
    loader.load_state_dict(state)
    for _ in loader:
        pass
    tail = list(loader.trace)
    metrics = loader.metrics()
    loader.close()
    assert metrics["data_loss_offsets"] == 3
    assert [s.as_dict() for s in loader.data_loss] == [{"partition": 0, "first": cursor, "low": cursor + 3,
                                                        "offsets": 3}]  # fmt: skip
    assert all(o >= cursor + 3 for p, o, _ in tail if p == 0)
    lost = {k for k in data.blocks if k[0] == 0 and cursor <= k[1] < cursor + 3}
    assert lost and not lost & set(tail) and not set(head) & set(tail)


@pytest.mark.parametrize("allow", [False, True])
def test_records_deleted_while_reading_never_make_the_consumer_jump(kafka, allow):
    data = make_topic(kafka, 1)
    produce(kafka, data, 8, seed=5)
    state, _ = _head_state(kafka, data, batches=1)
    cursor = state["partitions"]["0"]["offset"]
    loader = KafkaBlockLoader(_cfg(kafka, data.topic, **({"allow_data_loss": True} if allow else {})))
    loader.load_state_dict(state)  # the check passes: nothing is deleted yet
    _delete_below(kafka, data.topic, 0, cursor + 4)  # ... and now the brokers delete records before it reads them
    if not allow:
        with pytest.raises(DataLossError, match=rf"\[0\] offsets \[{cursor}, {cursor + 4}\)"):
            for _ in loader:
                pass
    else:
        for _ in loader:
            pass
        assert loader.metrics()["data_loss_offsets"] == 4
        assert loader.trace and all(o >= cursor + 4 for _, o, _ in loader.trace)
    loader.close()


# -- a deleted and recreated topic ------------------------------------------------------------


def test_a_state_of_a_recreated_topic_is_a_clear_error_never_nothing_new(kafka):
    data = make_topic(kafka, 2)
    produce(kafka, data, 4, seed=6)
    state, _ = _head_state(kafka, data)
    recreate_topic(kafka, data.topic, partitions=2, replication_factor=3, min_insync_replicas=2)  # empty again
    loader = KafkaBlockLoader(_cfg(kafka, data.topic))
    with pytest.raises(TopicRecreatedError, match="deleted and recreated") as info:
        loader.load_state_dict(state)
    old_id = state["topic_id"]
    assert (info.value.saved_id, info.value.current_id) == (old_id, loader.topic_id) and old_id != loader.topic_id
    assert f"id {old_id}" in str(info.value) and f"now has id {loader.topic_id}" in str(info.value)
    # a version-1 state carries no id: its cursors past the new partitions' ends give the recreation away
    v1 = {k: v for k, v in state.items() if k != "topic_id"} | {"format_version": 1}
    with pytest.raises(TopicRecreatedError, match="past the end of their partitions"):
        loader.load_state_dict(v1)
    loader.close()


# -- the padded tail of a batch ---------------------------------------------------------------


class ByteTokenizer:
    """Bytes + 2 as token ids (0 and 1 are reserved; 1 is EOS): a vocabulary the tiny model holds."""

    name = "bytes"
    hash = "bytes-v1"
    eos_id = 1

    def encode_batch(self, texts):
        return [np.frombuffer(t.encode(), dtype=np.uint8).astype(np.uint32) + 2 for t in texts]


def test_a_batch_of_one_short_document_reaches_the_train_loop_with_its_tokens_intact(kafka):
    from pipeline_project.training.presets import build_model
    from pipeline_project.training.trainer import build_optimizer, inputs_and_labels, seed_everything, train
    from pipeline_project_tests.training.helpers import SMALL_VOCAB, tiny_config

    seq = 32
    topic = unique_topic("short")
    ensure_topic(kafka.make_admin(), topic, partitions=2)
    text = "a short document"  # 16 bytes: 16 tokens + EOS, far below seq_len
    tok = ByteTokenizer()
    report = tokenize_and_produce(
        kafka,
        ProduceRequest(topic=topic, ledger_key="one", content_hash="h-one", source="one", seq_len=seq, tokenizer=tok),
        iter([text]),
    )
    assert report.blocks == 1  # the whole batch is one partial block: padded, not dropped
    assert (report.tokens, report.tail_tokens) == (17, 17)
    assert (report.pad_tokens, report.dropped_tokens) == (seq - 17, 0)
    assert report.to_metadata()["tokens"] == 17

    cfg = LoaderConfig(kafka=kafka, topic=topic, seq_len=seq, batch_size=1, rank=0, world_size=1,
                       expected_tokenizer_hash=tok.hash, idle_timeout_s=10.0)  # fmt: skip
    with KafkaBlockLoader(cfg) as loader:
        batches = [b.clone() for b in loader]
        metrics = loader.metrics()
    assert len(batches) == 1
    row = batches[0][0]
    expected = np.concatenate([tok.encode_batch([text])[0], [tok.eos_id]])
    np.testing.assert_array_equal(row[:17].numpy(), expected)  # every token of the document, and its EOS
    assert torch.all(row[17:] == -1) and PAD_TOKEN not in row.tolist()
    assert (metrics["tokens_delivered"], metrics["pad_tokens_delivered"]) == (17, seq - 17)

    inputs, labels = inputs_and_labels(batches[0], pad_input_id=tok.eos_id)
    assert torch.equal(inputs[0, :17], row[:17]) and torch.all(inputs[0, 17:] == tok.eos_id)
    assert torch.equal(labels[0, :17], row[:17]) and torch.all(labels[0, 17:] == -100)
    seed_everything(0)
    model = build_model("tiny", SMALL_VOCAB)
    train_cfg = tiny_config(batch_size=1, max_steps=3)
    result = train(train_cfg, batches * 3, model=model, optimizer=build_optimizer(model, train_cfg))
    assert result.steps == 3 and all(np.isfinite(result.losses))
    assert result.tokens == 3 * 17  # padding is never trained on or counted
