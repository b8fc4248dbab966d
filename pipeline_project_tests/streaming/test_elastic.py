"""Any world size against the real brokers: more ranks than partitions, elastic resume, a topic that grows.

Ranks are loader instances in one process, driven in lockstep the way the trainer drives DDP ranks: a step
happens only when every rank has a batch, and the state a rank saves is the one from before the fetch that
found a rank without one (`trainer.train`'s rule for uneven ends: the step count is the smallest any rank
can feed; the blocks the other ranks fetched for the step that did not happen stay unconsumed).

Blocks are compared by content hash (`_digest`), not by counts or traces.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import Counter

import pytest

from pipeline_project.streaming.kafka.client import KafkaSettings
from pipeline_project.streaming.load.domain_source import make_loader, merge_mixture_states
from pipeline_project.streaming.load.loader import LoaderConfig
from pipeline_project.streaming.load.mixture import MixtureConfig
from pipeline_project.streaming.load.state import merge_states
from pipeline_project.streaming.load.stripes import ALL, consumed_blocks
from pipeline_project_tests.streaming.kafka_helpers import grow_topic
from pipeline_project_tests.streaming.test_loader_support import (
    SEQ_LEN,
    TOKENIZER_HASH,
    TopicData,
    make_topic,
    produce,
)

pytestmark = pytest.mark.stack

DOMAINS = ("code", "en_web")


@pytest.fixture(scope="module")
def kafka(stack) -> KafkaSettings:
    return KafkaSettings.from_settings(stack)


def _digest(row) -> str:
    return hashlib.blake2b(row.tobytes(), digest_size=12).hexdigest()


def _cfg(kafka, data: TopicData, world_size: int, rank: int, **kw) -> LoaderConfig:
    base = dict(kafka=kafka, topic=data.topic, seq_len=SEQ_LEN, batch_size=2, rank=rank, world_size=world_size,
                expected_tokenizer_hash=TOKENIZER_HASH, trace=True, idle_timeout_s=10.0, seed=4)  # fmt: skip
    return LoaderConfig(**{**base, **kw})


def lockstep(kafka, data, world_size, states=None, max_steps=None, **kw):
    """(steps, per-rank digests of the rows trained, per-rank traces, every rank's state after the last step)."""
    loaders = [make_loader(_cfg(kafka, data, world_size, r, **kw)) for r in range(world_size)]
    try:
        if states is not None:
            for loader in loaders:
                loader.load_state_dict(json.loads(json.dumps(states)))  # as saved in a checkpoint
        its = [iter(loader) for loader in loaders]
        rows: list[list[str]] = [[] for _ in loaders]
        steps = 0
        while max_steps is None or steps < max_steps:
            before = [loader.state_dict() for loader in loaders]
            batches = [next(it, None) for it in its]
            if any(b is None for b in batches):
                return steps, rows, [list(lo.trace) for lo in loaders], before
            for mine, batch in zip(rows, batches, strict=True):
                mine.extend(_digest(row) for row in batch.numpy())
            steps += 1
        return steps, rows, [list(lo.trace) for lo in loaders], [lo.state_dict() for lo in loaders]
    finally:
        for loader in loaders:
            loader.close()


def _consumed(data: TopicData, partitions: dict, domain: str | None = None) -> set[str]:
    """Digests of the topic's blocks (of `domain`) that merged positions count as consumed."""
    out = set()
    for p, o, b in data.blocks:
        if domain is not None and data.domains[(p, o, b)] != domain:
            continue
        entry = partitions.get(str(p))
        used = consumed_blocks(entry, o) if entry is not None else 0
        if used == ALL or b < used:
            out.add(_digest(data.expected_row((p, o, b))))
    return out


def _every_block(data: TopicData) -> Counter:
    return Counter(_digest(data.expected_row(k)) for k in data.blocks)


def _trained_once(*phases) -> Counter:
    trained = Counter(d for rows in phases for rank in rows for d in rank)
    assert max(trained.values()) == 1, "a block was trained twice"
    return trained


def test_six_ranks_on_four_partitions_read_every_block_once(kafka):
    data = make_topic(kafka, 4)
    produce(kafka, data, 8, seed=31)
    produce(kafka, data, 8, seed=32)
    steps, rows, traces, states = lockstep(kafka, data, 6)
    assert steps > 0 and all(len(r) == 2 * steps for r in rows)  # every DDP step fed on every rank
    # every rank read stripes of two partitions, and every partition was read by three ranks
    assert all(len({p for p, _, _ in t}) == 2 for t in traces)
    assert Counter(p for t in traces for p in {p for p, _, _ in t}) == dict.fromkeys(range(4), 3)
    trained = _trained_once(rows)
    merged = merge_states(states)["partitions"]
    assert set(trained) == _consumed(data, merged)
    # the stripes stopped at different offsets: the union names messages consumed above its offsets
    assert any(e.get("done") for e in merged.values()), merged
    # what the uneven end left unconsumed is read by the next run (one rank, batches of one), and only that
    _, rest, _, _ = lockstep(kafka, data, 1, states=states, batch_size=1)
    assert _trained_once(rows, rest) == _every_block(data)


def test_the_lag_of_ranks_sharing_a_partition_adds_up_to_the_partitions(kafka):
    data = make_topic(kafka, 4)
    produce(kafka, data, 9, seed=35)
    loaders = [make_loader(_cfg(kafka, data, 6, r)) for r in range(6)]
    try:
        ends, total = {}, Counter()
        for loader in loaders:
            ends.update(loader.end_offsets)
            total.update(loader.metrics()["lag"])
    finally:
        for loader in loaders:
            loader.close()
    assert all(ends[p] <= total[p] < ends[p] + 3 for p in range(4)), (total, ends)


def test_streaming_ranks_sharing_partitions_while_batches_arrive(kafka):
    data = make_topic(kafka, 2)
    produce(kafka, data, 4, seed=37)

    def keep_producing():
        for i in range(3):
            time.sleep(0.5)
            produce(kafka, data, 3, seed=38 + i)

    producer = threading.Thread(target=keep_producing)
    producer.start()
    try:
        steps, rows, _, states = lockstep(kafka, data, 3, mode="streaming", idle_timeout_s=4.0)
    finally:
        producer.join()
    assert steps > 0
    trained = _trained_once(rows)
    assert set(trained) == _consumed(data, merge_states(states)["partitions"])
    _, rest, _, _ = lockstep(kafka, data, 1, states=states, batch_size=1)
    assert _trained_once(rows, rest) == _every_block(data)


def test_six_ranks_resume_exactly_at_the_same_world_size(kafka):
    data = make_topic(kafka, 4)
    produce(kafka, data, 10, seed=41)
    _, full_rows, full, _ = lockstep(kafka, data, 6, max_steps=8)
    _, _, head, states = lockstep(kafka, data, 6, max_steps=3)
    _, _, tail, _ = lockstep(kafka, data, 6, states=states, max_steps=5)
    assert [h + t for h, t in zip(head, tail, strict=True)] == full
    _trained_once(full_rows)


def _elastic(kafka, data, **kw):
    """4 -> 2 -> 6 ranks with new batches produced before each change; the rows trained and the final states."""
    produce(kafka, data, 6, seed=51, **kw)
    _, a, _, states = lockstep(kafka, data, 4, max_steps=4, **_mix(kw))
    produce(kafka, data, 4, seed=52, **kw)
    _, b, _, states = lockstep(kafka, data, 2, states=states, max_steps=6, **_mix(kw))
    produce(kafka, data, 4, seed=53, **kw)
    steps, c, _, states = lockstep(kafka, data, 6, states=states, **_mix(kw))
    assert steps > 0
    return (a, b, c), states


def _mix(kw):
    return {"mixture": MixtureConfig(proportions={"code": 0.3, "en_web": 0.7})} if kw.get("domains") else {}


def test_elastic_resume_4_2_6_on_a_growing_stream_trains_each_block_once(kafka):
    data = make_topic(kafka, 4)
    phases, states = _elastic(kafka, data)
    trained = _trained_once(*phases)
    assert set(trained) == _consumed(data, merge_states(states)["partitions"])
    _, rest, _, _ = lockstep(kafka, data, 1, states=states, batch_size=1)
    assert _trained_once(*phases, rest) == _every_block(data)


def test_elastic_resume_4_2_6_with_the_domain_mixture(kafka):
    data = make_topic(kafka, 4)
    phases, states = _elastic(kafka, data, domains=DOMAINS)
    trained = _trained_once(*phases)
    merged = merge_mixture_states(states)["mixture"]["domains"]
    consumed = set().union(*(_consumed(data, merged[d]["partitions"], d) for d in DOMAINS))
    assert set(trained) == consumed
    # the mixture held across the world-size changes: every phase's global sequence is within a couple of
    # blocks per step of the 30/70 target
    domain_of = {_digest(data.expected_row(k)): data.domains[k] for k in data.blocks}
    for rows in phases:
        drawn = Counter(domain_of[d] for rank in rows for d in rank)
        n = sum(drawn.values())
        assert abs(drawn["code"] - 0.3 * n) <= 2 + 0.02 * n, drawn
    # and nothing is left out: one rank that renormalizes when a domain runs dry reads the rest of both
    drain = MixtureConfig(proportions={"code": 0.3, "en_web": 0.7}, on_domain_exhausted="renormalize")
    _, rest, _, _ = lockstep(kafka, data, 1, states=states, batch_size=1, mixture=drain)
    assert _trained_once(*phases, rest) == _every_block(data)


@pytest.mark.parametrize("world_size", [2, 4])
def test_a_partition_added_after_a_checkpoint_is_read_from_offset_zero(kafka, world_size):
    data = make_topic(kafka, 2)
    produce(kafka, data, 6, seed=61)
    _, before, _, states = lockstep(kafka, data, world_size, max_steps=3)
    grow_topic(kafka, data.topic, 3)
    data.partitions = 3
    produce(kafka, data, 5, seed=62)  # the old partitions and the new one
    # the same world size resumes (partitions now go to other ranks), then one rank reads what is left
    steps, after, _, states = lockstep(kafka, data, world_size, states=states)
    assert steps > 0
    _, rest, _, _ = lockstep(kafka, data, 1, states=states, batch_size=1)
    trained = _trained_once(before, after, rest)
    assert trained == _every_block(data)
    new = {_digest(data.expected_row(k)) for k in data.blocks if k[0] == 2}
    assert min(o for p, o, _ in data.blocks if p == 2) == 0 and new <= set(trained)
