"""Two domains through the real brokers: the producer's `domain` headers, and the mixture loader's draws.

Blocks are produced with the real transactional producer, per domain (`(domain, blocks)` items); every block's
first token says its domain and its second its index in that domain's stream, so the tests can check what
the loader delivered without trusting its trace.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from dataclasses import dataclass

import numpy as np
import pytest

from pipeline_project.streaming.kafka.client import KafkaSettings
from pipeline_project.streaming.kafka.format import read_header
from pipeline_project.streaming.kafka.topics import ensure_topic
from pipeline_project.streaming.load.domain_source import make_loader
from pipeline_project.streaming.load.loader import LoaderConfig
from pipeline_project.streaming.load.mixture import MixtureConfig
from pipeline_project.streaming.produce.producer import produce_blocks
from pipeline_project.streaming.produce.request import ProducerConfig, ProduceRequest
from pipeline_project.streaming.produce.verify import verify_produced
from pipeline_project_tests.streaming.kafka_helpers import consume_all

pytestmark = pytest.mark.stack

SEQ_LEN = 16
DOMAIN_IDS = {"en_web": 1, "code": 2}
COUNTS = {"en_web": 600, "code": 300}


@dataclass(frozen=True)
class _Tok:
    name: str = "test-tok"
    hash: str = "test-hash"


def _blocks(domain: str, first: int, n: int) -> np.ndarray:
    b = np.full((n, SEQ_LEN), 7, dtype=np.uint32)
    b[:, 0] = DOMAIN_IDS[domain]
    b[:, 1] = np.arange(first, first + n)
    return b


def _items():
    """Both domains interleaved in the batch's stream, in pieces of uneven size."""
    made = dict.fromkeys(COUNTS, 0)
    rng = np.random.default_rng(0)
    while any(made[d] < COUNTS[d] for d in COUNTS):
        for d in COUNTS:
            n = min(int(rng.integers(1, 9)), COUNTS[d] - made[d])
            if n:
                yield d, _blocks(d, made[d], n)
                made[d] += n


@pytest.fixture(scope="module")
def kafka(stack) -> KafkaSettings:
    return KafkaSettings.from_settings(stack)


@pytest.fixture(scope="module")
def produced(kafka):
    topic = f"test-mixture-{uuid.uuid4().hex[:10]}"
    ensure_topic(kafka.make_admin(), topic, partitions=4, replication_factor=3, min_insync_replicas=2)
    report = produce_blocks(
        kafka,
        ProduceRequest(
            topic=topic,
            ledger_key="b1",
            content_hash="c1",
            source="b1",
            seq_len=SEQ_LEN,
            tokenizer=_Tok(),
            config=ProducerConfig(max_message_bytes=5 * SEQ_LEN * 4),
        ),
        _items(),
    )
    return topic, report


def _cfg(kafka, topic, proportions=None, policy="wait", **kw) -> LoaderConfig:
    mixture = MixtureConfig(proportions=proportions, on_domain_exhausted=policy) if proportions else None
    base = dict(kafka=kafka, topic=topic, seq_len=SEQ_LEN, batch_size=8, rank=0, world_size=1, trace=True,
                idle_timeout_s=10.0, seed=3, mixture=mixture, expected_tokenizer_hash="test-hash")  # fmt: skip
    return LoaderConfig(**{**base, **kw})


def _run(cfg, state=None, max_batches=None):
    loader = make_loader(cfg)
    if state is not None:
        loader.load_state_dict(json.loads(json.dumps(state)))
    rows = []
    for batch in loader:
        rows.extend((int(r[0]), int(r[1])) for r in batch)
        if max_batches is not None and len(rows) == max_batches * cfg.batch_size:
            break
    out = rows, list(loader.trace), loader.state_dict(), loader.metrics()
    loader.close()
    return out


NAMES = {v: k for k, v in DOMAIN_IDS.items()}


def test_every_message_carries_its_domain_and_never_mixes_two(kafka, produced):
    topic, report = produced
    assert report.domains["en_web"]["blocks"] == 600 and report.domains["code"]["blocks"] == 300
    assert report.domains["code"]["tokens"] == 300 * SEQ_LEN
    seen = Counter()
    for msg in consume_all(kafka, topic):
        header = read_header(msg.headers(), topic=topic, partition=msg.partition(), offset=msg.offset())
        blocks = np.frombuffer(msg.value(), dtype="<u4").reshape(-1, SEQ_LEN)
        assert {NAMES[int(i)] for i in blocks[:, 0]} == {header.domain}
        seen[header.domain] += len(blocks)
    assert seen == Counter(COUNTS)
    assert verify_produced(kafka, report)["domains"]["code"]["blocks"] == 300


def test_mixed_draw_hits_the_proportions_and_each_row_is_of_its_drawn_domain(kafka, produced):
    topic, _ = produced
    rows, trace, _, metrics = _run(_cfg(kafka, topic, {"en_web": 0.6, "code": 0.4}), max_batches=50)
    counts = Counter(NAMES[d] for d, _ in rows)
    assert abs(counts["en_web"] - 240) <= 1 and abs(counts["code"] - 160) <= 1
    assert [NAMES[d] for d, _ in rows] == [t[3] for t in trace]  # the trace's domain is the block's
    for d in DOMAIN_IDS.values():  # each domain's blocks come once each
        idx = [i for dd, i in rows if dd == d]
        assert len(idx) == len(set(idx))
    assert metrics["mixture"]["realized"]["code"] == pytest.approx(0.4, abs=0.01)


def test_resume_from_the_state_gives_the_identical_sequence(kafka, produced):
    topic, _ = produced
    cfg = _cfg(kafka, topic, {"en_web": 0.6, "code": 0.4})
    whole, _, _, _ = _run(cfg, max_batches=40)
    head, _, state, _ = _run(cfg, max_batches=15)
    tail, _, _, _ = _run(cfg, state=state, max_batches=25)
    assert head + tail == whole


def _streams(kafka, topic):
    """(domain id, partition) -> that domain's block indices in the partition, in offset order."""
    out = {}
    for msg in sorted(consume_all(kafka, topic), key=lambda m: (m.partition(), m.offset())):
        for d, i in np.frombuffer(msg.value(), dtype="<u4").reshape(-1, SEQ_LEN)[:, :2]:
            out.setdefault((int(d), msg.partition()), []).append(int(i))
    return out


def test_changed_proportions_continue_without_replay_or_skip(kafka, produced):
    topic, _ = produced
    head, head_trace, state, _ = _run(_cfg(kafka, topic, {"en_web": 0.6, "code": 0.4}), max_batches=20)
    tail, tail_trace, _, metrics = _run(_cfg(kafka, topic, {"en_web": 0.2, "code": 0.8}), state=state)
    rows, trace = head + tail, head_trace + tail_trace
    assert len(set(rows)) == len(rows)  # nothing replayed
    tail_counts = Counter(NAMES[d] for d, _ in tail)
    assert abs(tail_counts["code"] / len(tail) - 0.8) < 0.02  # the new proportions hold after the change
    assert metrics["mixture"]["exhausted"] == ["code"]  # wait: the invocation ends where code ran dry
    # nothing skipped: in each partition, a domain's delivered blocks are a prefix of its blocks there, in order
    delivered = {}
    for (d, i), (p, *_rest) in zip(rows, trace, strict=True):
        delivered.setdefault((d, p), []).append(i)
    streams = _streams(kafka, topic)
    for key, idx in delivered.items():
        assert idx == streams[key][: len(idx)], key


@pytest.mark.parametrize("policy", ["wait", "stop", "renormalize"])
def test_dry_domain_policies(kafka, produced, policy):
    topic, _ = produced
    rows, _, _, metrics = _run(_cfg(kafka, topic, {"en_web": 0.3, "code": 0.7}, policy=policy))
    counts = Counter(NAMES[d] for d, _ in rows)
    events = metrics["mixture"]["events"]
    assert events[0]["domain"] == "code" and all(e["policy"] == policy for e in events)
    if policy == "renormalize":  # code's blocks all delivered, then en_web alone to its end (short tail dropped)
        assert [e["domain"] for e in events] == ["code", "en_web"]
        assert counts["code"] == 300 and 600 - 8 < counts["en_web"] <= 600
    else:  # the run ends where code ran dry: the proportions held to the end
        assert len(events) == 1
        assert 300 - 8 < counts["code"] <= 300 and abs(counts["code"] / len(rows) - 0.7) < 0.01


def test_two_ranks_draw_disjoint_blocks_whose_union_per_step_is_the_single_rank_batch(kafka, produced):
    topic, _ = produced
    proportions = {"en_web": 0.6, "code": 0.4}
    single, _, _, _ = _run(_cfg(kafka, topic, proportions, batch_size=16), max_batches=10)
    ranks = [_run(_cfg(kafka, topic, proportions, rank=r, world_size=2), max_batches=10)[0] for r in range(2)]
    assert not set(ranks[0]) & set(ranks[1])  # disjoint: each rank reads its own partitions
    for step in range(10):
        union = Counter(d for r in ranks for d, _ in r[step * 8 : (step + 1) * 8])
        assert union == Counter(d for d, _ in single[step * 16 : (step + 1) * 16])


def test_without_a_mixture_the_plain_loader_reads_every_block(kafka, produced):
    topic, _ = produced
    rows, _, _, metrics = _run(_cfg(kafka, topic))
    assert "mixture" not in metrics and len(rows) == 896  # 900 blocks, the short last batch dropped
