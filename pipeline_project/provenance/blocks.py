"""The inverse of `trace`: documents of a produced publication -> the blocks of the topic that hold them, and the
training steps that already read those blocks (the checkpoints' step logs).

A document is ordinal `n` of its publication (its position in the publication's shards). The batch's ledger entry
names the offsets of its messages; each message's `spans` header the ordinals and token ranges of the pieces of
documents in it, and its `pub` header the publication those ordinals index. A block holds the document when one
of its spans has its ordinal. A message of the batch that names another publication (an earlier production,
retired) is not this publication's; one without the header is taken as the entry's (produced before the header).

Consumption: every checkpoint folder of every lineage under the checkpoints root (rewound ones too: they trained
what they trained) holds, per step and rank, the runs `[partition, offset, first block, count]` its ranks read
since the checkpoint before it. A run over a block is a read of it; blocks a step passed over as retracted are in
the step log's `retracted`, not its runs. Steps trained after the newest checkpoint are in no step log yet.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pipeline_project.streaming.kafka.spans import spans_of_block
from pipeline_project.streaming.retractions.model import BlockRange

Address = tuple[int, int, int]  # partition, offset, block


@dataclass(frozen=True)
class DocumentBlocks:
    blocks: dict[Address, dict[int, int]]  # block -> {ordinal: the document's tokens in it}
    unrecorded: list[str]  # messages (partition@offset) of the publication with no `spans` header
    messages: int  # the publication's messages read


def document_blocks(
    kafka: Any,
    topic: str,
    offsets: dict,
    source: str,
    publication: str,
    ordinals: Iterable[int],
    timeout_s: float = 30.0,
) -> DocumentBlocks:
    """The blocks of the messages in `offsets` ({partition: [first, last]}, a ledger entry's) whose source is
    `source` and whose publication is `publication` (or not named) that hold any of `ordinals`."""
    wanted = set(ordinals)
    read = {(m.partition, m.offset): m for m in batch_messages(kafka, topic, offsets, source, timeout_s)}
    blocks: dict[Address, dict[int, int]] = {}
    unrecorded, messages = [], 0
    for (p, offset), msg in sorted(read.items()):
        if msg.publication is not None and msg.publication != publication:
            continue
        messages += 1
        if msg.spans is None:
            unrecorded.append(f"{p}@{offset}")
            continue
        for b in range(len(msg.blocks)):
            for _at, span in spans_of_block(msg.spans, msg.seq_len, b):
                if span.ordinal in wanted:
                    held = blocks.setdefault((p, offset, b), {})
                    held[span.ordinal] = held.get(span.ordinal, 0) + span.count
    return DocumentBlocks(blocks, unrecorded, messages)


def batch_messages(kafka: Any, topic: str, offsets: dict, source: str, timeout_s: float = 30.0) -> list[Any]:
    """The committed messages (`trace.Message`) in `offsets` ({partition: [first, last]}, inclusive) whose `src`
    header is `source` (transactions of several producers interleave in a partition), read in one pass."""
    from confluent_kafka import TopicPartition

    from pipeline_project.provenance.trace import ProvenanceError, message_of
    from pipeline_project.streaming.kafka.format import H_SOURCE

    consumer = kafka.make_consumer(overrides={"enable.partition.eof": True, "isolation.level": "read_committed"})
    found, wanted = [], source.encode()
    try:
        for partition, (first, last) in sorted((int(p), (int(r[0]), int(r[1]))) for p, r in offsets.items()):
            consumer.assign([TopicPartition(topic, partition, first)])
            deadline, done = time.monotonic() + timeout_s, False
            while not done:
                if time.monotonic() > deadline:
                    raise ProvenanceError(f"{topic}[{partition}]: offsets {first}..{last} not read in {timeout_s:g}s")
                for msg in consumer.consume(num_messages=500, timeout=0.5):
                    if msg.error() is not None or msg.offset() > last:
                        done = True  # the partition's end, or past the range
                        break
                    if dict(msg.headers() or []).get(H_SOURCE) == wanted:
                        found.append(message_of(topic, msg))
    finally:
        consumer.close()
    return found


def block_ranges(addresses: Iterable[Address]) -> tuple[BlockRange, ...]:
    """`addresses` as ranges [first, end) of consecutive blocks per message, in topic order."""
    ranges: list[BlockRange] = []
    for p, offset, block in sorted(set(addresses)):
        last = ranges[-1] if ranges else None
        if last is not None and (last.partition, last.offset, last.end) == (p, offset, block):
            ranges[-1] = BlockRange(partition=p, offset=offset, first=last.first, end=block + 1)
        else:
            ranges.append(BlockRange(partition=p, offset=offset, first=block, end=block + 1))
    return tuple(ranges)


def reads_in_steps(body: dict, topic: str, addresses: set[Address]) -> list[tuple[int, int, Address]]:
    """(step, rank, block) for every read of `addresses` one checkpoint's steps.json records."""
    if body.get("topic") != topic or not addresses:
        return []
    by_message: dict[tuple[int, int], list[int]] = {}
    for p, offset, block in addresses:
        by_message.setdefault((p, offset), []).append(block)
    out = []
    for rank, steps in enumerate(body.get("ranks", [])):
        for step, runs in steps.items():
            for p, offset, first, count in runs:
                for block in by_message.get((int(p), int(offset)), ()):
                    if int(first) <= block < int(first) + int(count):
                        out.append((int(step), rank, (int(p), int(offset), block)))
    return out


def consumed_blocks(
    s3: Any, bucket: str, root: str, topic: str, addresses: Iterable[Address], lineages: list[str] | None = None
) -> list[dict[str, Any]]:
    """Every read of `addresses` the step logs of `lineages` (default: all under `root`) record: lineage,
    checkpoint, step, rank, partition, offset, block; by lineage, step, rank."""
    from pipeline_project.common.s3 import key_in_bucket
    from pipeline_project.provenance.trace import STEPS_FILE
    from pipeline_project.training.checkpoint.lineages import lineage_prefix, list_lineages, step_refs

    wanted = set(addresses)
    out: list[dict[str, Any]] = []
    if not wanted:
        return out
    for lineage in lineages if lineages is not None else list_lineages(s3, bucket, root):
        for _step, refs in sorted(step_refs(s3, bucket, lineage_prefix(root, lineage)).items()):
            for ref in refs:
                key = f"{key_in_bucket(ref.uri, bucket).rstrip('/')}/{STEPS_FILE}"
                try:
                    body = json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
                except s3.exceptions.NoSuchKey:
                    continue  # saved before step logs, or half uploaded
                for step, rank, (p, offset, block) in reads_in_steps(body, topic, wanted):
                    out.append(
                        {
                            "lineage": lineage,
                            "checkpoint": ref.uri,
                            "step": step,
                            "rank": rank,
                            "partition": p,
                            "offset": offset,
                            "block": block,
                        }
                    )
    return sorted(out, key=lambda r: (r["lineage"], r["step"], r["rank"], r["partition"], r["offset"], r["block"]))
