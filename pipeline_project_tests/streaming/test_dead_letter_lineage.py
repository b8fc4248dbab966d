"""Dead letters over a training lineage, against the real brokers: the count rides in the loader state, so the
budget holds across invocations, and the dead letters land in `<topic>.dlq` without configuring it."""

from __future__ import annotations

import pytest

from pipeline_project.streaming.errors import DeadLetterLimitError
from pipeline_project.streaming.kafka.client import KafkaSettings
from pipeline_project.streaming.load.config import dead_letter_topic_for
from pipeline_project.streaming.load.loader import KafkaBlockLoader, LoaderConfig

from .kafka_helpers import consume_all
from .test_loader import _bad_message
from .test_loader_support import SEQ_LEN, TOKENIZER_HASH, make_topic, produce, produce_raw


def _cfg(kafka, topic: str, **kw) -> LoaderConfig:
    return LoaderConfig(kafka=kafka, topic=topic, seq_len=SEQ_LEN, batch_size=1, rank=0, world_size=1,
                        expected_tokenizer_hash=TOKENIZER_HASH, idle_timeout_s=10.0, max_dead_letters=2, **kw)  # fmt: skip


def _bad(kafka, topic: str) -> int:
    value, headers, _ = _bad_message("tokenizer_hash")
    return produce_raw(kafka, topic, 0, value, headers)


@pytest.mark.stack
def test_the_dead_letter_budget_holds_over_a_lineage_not_per_invocation(stack):
    kafka = KafkaSettings.from_settings(stack)
    data = make_topic(kafka, 1)
    produce(kafka, data, 2)
    bad = [_bad(kafka, data.topic)]
    produce(kafka, data, 2)
    bad.append(_bad(kafka, data.topic))
    produce(kafka, data, 2)

    first = KafkaBlockLoader(_cfg(kafka, data.topic))
    assert len(list(first)) == len(data.blocks)  # every good block; two dead letters: within the budget of 2
    state = first.state_dict()
    first.close()
    assert state["dead_letters"] == 2 and first.metrics()["dead_letters"] == 2

    again = KafkaBlockLoader(_cfg(kafka, data.topic))  # resumed with nothing new: the count is not taken twice
    again.load_state_dict([state])
    assert list(again) == [] and again.metrics()["dead_letters_lineage"] == 2
    assert again.state_dict()["dead_letters"] == 2
    again.close()

    produce(kafka, data, 1)
    bad.append(_bad(kafka, data.topic))  # one more: under 2 for this invocation, the third of the lineage
    produce(kafka, data, 1)
    second = KafkaBlockLoader(_cfg(kafka, data.topic))
    second.load_state_dict([state])
    with pytest.raises(DeadLetterLimitError, match="per training lineage: 2 dead letters before") as info:
        list(second)
    second.close()
    assert f"{data.topic}[0]@{bad[2]}" in str(info.value)

    letters = consume_all(kafka, dead_letter_topic_for(data.topic))  # the default dead-letter topic
    assert sorted(m.key().decode() for m in letters) == [f"{data.topic}/0/{o}" for o in bad[:2]]


def test_every_rank_state_of_a_checkpoint_sums_to_the_lineage_count():
    from pipeline_project.streaming.load.dead_letters import LineageBudget

    states = [{"rank": 0, "dead_letters": 3}, {"rank": 1, "dead_letters": 2}]
    rank0, rank1 = LineageBudget(10, rank=0), LineageBudget(10, rank=1)
    rank0.load(states, own=0)
    rank1.load(states, own=0)
    assert rank0.remaining(own=1) == rank1.remaining(own=1) == 10 - 5 - 1
    assert rank0.carry(own=1) + rank1.carry(own=4) == 5 + 1 + 4  # the next checkpoint's states: lineage 10
    alone = LineageBudget(10, rank=1)
    alone.load({"dead_letters": 2}, own=0)  # a rank given its own state carries it on
    assert alone.carry(own=1) == 3


def test_the_dead_letter_topic_is_the_dlq_by_default_and_none_turns_it_off():
    kafka = KafkaSettings(bootstrap_servers="b:1")
    assert _cfg(kafka, "blocks").dead_letter_topic == "blocks.dlq"
    assert _cfg(kafka, "blocks", dead_letter_topic=None).dead_letter_topic is None
    assert _cfg(kafka, "blocks", dead_letter_topic="elsewhere").dead_letter_topic == "elsewhere"
