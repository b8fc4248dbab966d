"""What the fault tests check, by content: blocks that carry their sequence number, what read_committed readers
see of a topic, and the exactly-once audit of one batch.

A test block carries its sequence number in its first token and a pseudo-random function of it in the rest
(`seq_blocks`), so `audit` can tell a lost, duplicated, reordered or corrupted block from a good one.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from types import SimpleNamespace
from typing import Any

import numpy as np
from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, TopicPartition

from pipeline_project.streaming.kafka.client import KafkaSettings
from pipeline_project.streaming.kafka.format import decode_message, read_header

# A tokenizer identity for blocks that are not text: produce_blocks only records name and hash.
SEQ_TOKENIZER = SimpleNamespace(name="reliability-seq", hash="5e9" + "0" * 61)
# Token ids stay below this, so the blocks also fit the DeepSeek vocabulary (129,280) when a trainer reads them.
CONTENT_MODULUS = 100_000


# -- blocks with sequence numbers -----------------------------------------------------------------------------


def seq_blocks(first: int, n: int, seq_len: int) -> np.ndarray:
    """Blocks `first .. first+n-1`: token 0 is the sequence number, the rest a function of it (content check)."""
    seq = np.arange(first, first + n, dtype=np.uint64)
    out = np.empty((n, seq_len), dtype=np.uint32)
    out[:, 0] = seq
    cols = np.arange(1, seq_len, dtype=np.uint64)
    out[:, 1:] = ((seq[:, None] * np.uint64(2_654_435_761) + cols * np.uint64(40_503)) % CONTENT_MODULUS).astype(
        np.uint32
    )
    return out


def block_is_intact(block: np.ndarray) -> bool:
    return bool(np.array_equal(block, seq_blocks(int(block[0]), 1, len(block))[0]))


# -- what read_committed consumers see ------------------------------------------------------------------------


@dataclass(frozen=True)
class SeenMessage:
    partition: int
    offset: int
    source: str
    seqs: tuple[int, ...]
    intact: bool


def read_committed(
    settings: KafkaSettings, topic: str, timeout_s: float = 60.0, isolation: str = "read_committed"
) -> list[SeenMessage]:
    """Every message of `topic` visible to `isolation` readers, from the beginning to the last stable offset
    (read_committed) or the high watermark (read_uncommitted)."""
    consumer = settings.make_consumer(overrides={"enable.partition.eof": True, "isolation.level": isolation})
    out: list[SeenMessage] = []
    try:
        parts = sorted(consumer.list_topics(topic=topic, timeout=10).topics[topic].partitions)
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
        pending = set(parts)
        deadline = time.monotonic() + timeout_s
        while pending:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic}: partitions {sorted(pending)} not read to their end in {timeout_s:g}s")
            for msg in consumer.consume(num_messages=1000, timeout=0.5):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        pending.discard(msg.partition())
                    elif not (err.retriable() or err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART):
                        raise KafkaException(err)
                    continue
                where = dict(topic=topic, partition=msg.partition(), offset=msg.offset())
                header = read_header(msg.headers(), **where)
                blocks = decode_message(msg.value(), msg.headers(), **where)
                out.append(
                    SeenMessage(
                        partition=msg.partition(),
                        offset=msg.offset(),
                        source=header.source,
                        seqs=tuple(int(b[0]) for b in blocks),
                        intact=all(block_is_intact(b) for b in blocks),
                    )
                )
    finally:
        consumer.close()
    return out


def uncommitted_records(settings: KafkaSettings, topic: str, timeout: float = 10.0) -> int:
    """Offsets between the last stable offset and the high watermark, over the topic's partitions: records of a
    transaction that is still open (a killed producer's, until it is fenced or times out)."""
    from confluent_kafka import IsolationLevel
    from confluent_kafka.admin import OffsetSpec

    admin = settings.make_admin()
    parts = sorted(admin.list_topics(topic=topic, timeout=timeout).topics[topic].partitions)

    def ends(level) -> dict[int, int]:
        req = {TopicPartition(topic, p): OffsetSpec.latest() for p in parts}
        futures = admin.list_offsets(req, isolation_level=level, request_timeout=timeout)
        return {tp.partition: int(f.result(timeout=timeout).offset) for tp, f in futures.items()}

    high, stable = ends(IsolationLevel.READ_UNCOMMITTED), ends(IsolationLevel.READ_COMMITTED)
    return sum(high[p] - stable[p] for p in parts)


@dataclass
class Audit:
    """Blocks expected vs found (read_committed), by sequence number; `ok` is the exactly-once invariant."""

    expected: int
    claimed: int | None  # the report's block count, when there is a report
    found: int  # distinct expected sequence numbers present
    lost: list[int] = field(default_factory=list)
    duplicated: list[int] = field(default_factory=list)
    unexpected: list[int] = field(default_factory=list)  # sequence numbers nobody produced
    out_of_order: list[str] = field(default_factory=list)  # partition: where the sequence went backwards
    corrupt: list[int] = field(default_factory=list)  # blocks whose content is not their sequence number's
    outside_claim: list[str] = field(default_factory=list)  # messages of the source outside the claimed ranges
    claim_mismatch: str = ""

    @property
    def ok(self) -> bool:
        return not (
            self.lost
            or self.duplicated
            or self.unexpected
            or self.out_of_order
            or self.corrupt
            or self.outside_claim
            or self.claim_mismatch
        )

    def summary(self) -> dict[str, Any]:
        d = asdict(self)
        for k in ("lost", "duplicated", "unexpected", "corrupt"):
            d[k] = len(d[k])
        d["ok"] = self.ok
        return d


def audit(
    seen: Sequence[SeenMessage], expected: Iterable[int], *, source: str | None = None, report: Any = None
) -> Audit:
    """Check that every expected sequence number is visible exactly once, in order within its partition, intact,
    and (with a `ProduceReport`) inside the offset ranges the report claims and as many as it claims."""
    expected = list(expected)
    mine = [m for m in seen if source is None or m.source == source]
    counts = Counter(s for m in mine for s in m.seqs)
    want = set(expected)
    result = Audit(
        expected=len(expected),
        claimed=report.blocks if report is not None else None,
        found=len(want & set(counts)),
        lost=sorted(want - set(counts)),
        duplicated=sorted(s for s, c in counts.items() if c > 1),
        unexpected=sorted(set(counts) - want),
        corrupt=sorted(s for m in mine if not m.intact for s in m.seqs),
    )
    by_partition: dict[int, list[int]] = {}
    for m in sorted(mine, key=lambda m: (m.partition, m.offset)):
        by_partition.setdefault(m.partition, []).extend(m.seqs)
    for p, seqs in sorted(by_partition.items()):
        backwards = [i for i in range(1, len(seqs)) if seqs[i] <= seqs[i - 1]]
        if backwards:
            i = backwards[0]
            result.out_of_order.append(f"partition {p}: {seqs[i - 1]} then {seqs[i]}")
    if report is not None:
        for m in mine:
            lo_hi = report.offsets.get(m.partition)
            if lo_hi is None or not lo_hi[0] <= m.offset <= lo_hi[1]:
                result.outside_claim.append(f"{m.partition}@{m.offset}")
        in_claim = sum(len(m.seqs) for m in mine if f"{m.partition}@{m.offset}" not in result.outside_claim)
        if in_claim != report.blocks or report.blocks != len(expected):
            result.claim_mismatch = (
                f"the report claims {report.blocks} blocks, {in_claim} are in its ranges, {len(expected)} were produced"
            )
    return result


# -- seeding a topic without the producer under test -----------------------------------------------------------


def write_seq_topic(
    settings: KafkaSettings,
    topic: str,
    n_blocks: int,
    seq_len: int,
    *,
    blocks_per_message: int,
    tokenizer: Any = SEQ_TOKENIZER,
    source: str = "seed",
) -> dict[int, int]:
    """Write sequence blocks `0 .. n_blocks-1` round robin over the topic's partitions with a plain idempotent
    producer (acks=all), for tests whose subject is the reader. Returns messages per partition."""
    from pipeline_project.streaming.kafka.format import encode_message

    parts = sorted(settings.make_admin().list_topics(topic=topic, timeout=10).topics[topic].partitions)
    producer = settings.make_producer()
    errors: list[str] = []
    per_partition: Counter = Counter()

    def delivered(err, msg):
        if err is not None:
            errors.append(err.str())

    for i, lo in enumerate(range(0, n_blocks, blocks_per_message)):
        blocks = seq_blocks(lo, min(blocks_per_message, n_blocks - lo), seq_len)
        value, headers = encode_message(
            blocks, tokenizer_name=tokenizer.name, tokenizer_hash=tokenizer.hash, source=source
        )
        p = parts[i % len(parts)]
        producer.produce(topic, value=value, headers=headers, partition=p, on_delivery=delivered)
        per_partition[p] += 1
        producer.poll(0)
    remaining = producer.flush(60)
    assert not remaining and not errors, f"seeding {topic}: {remaining} undelivered, errors {errors[:3]}"
    return dict(per_partition)
