"""Kept copies -> the blocks of the token topic that hold them: the inverse of `provenance.trace`.

A kept copy is document `ordinal` of its batch (its position in the batch's shards); the batch's ledger entry
names the offsets of its messages, and each message's `spans` header the ordinals and token ranges of the pieces
of documents in it. A block holds a copy when one of its spans has the copy's ordinal. A copy of a batch with no
ledger entry is not in the topic yet (`unproduced`): nothing to retract; a takedown run again after the batch is
produced retracts it then. Ordinals are read against the batch's current shard manifest.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from pipeline_project.ops.takedown.corpus import Corpus
from pipeline_project.ops.takedown.resolve import Copy
from pipeline_project.streaming.kafka.spans import spans_of_block
from pipeline_project.streaming.retractions.model import BlockRange


@dataclass(frozen=True)
class BlockHit:
    batch: str
    doc_id: str
    partition: int
    offset: int
    block: int
    tokens: int  # the copy's tokens in the block

    @property
    def address(self) -> tuple[int, int, int]:
        return self.partition, self.offset, self.block


def hits_in_message(message: Any, ordinals: dict[int, str]) -> list[BlockHit]:
    """The blocks of one message (`provenance.trace.Message`) holding any of `ordinals` ({ordinal: doc id})."""
    hits: dict[tuple[int, str], int] = {}
    for b in range(len(message.blocks)):
        for _at, span in spans_of_block(message.spans or [], message.seq_len, b):
            if span.ordinal in ordinals:
                key = (b, ordinals[span.ordinal])
                hits[key] = hits.get(key, 0) + span.count
    return [
        BlockHit(message.batch, doc, message.partition, message.offset, b, n) for (b, doc), n in sorted(hits.items())
    ]


def block_ranges(hits: Iterable[BlockHit]) -> tuple[BlockRange, ...]:
    """The blocks of `hits` as ranges [first, end) of consecutive blocks per message, in topic order."""
    from pipeline_project.provenance.blocks import block_ranges as address_ranges

    return address_ranges(h.address for h in hits)


def ordinals_of(kept_records: Sequence[dict], doc_ids: Iterable[str]) -> dict[int, str]:
    wanted = set(doc_ids)
    return {i: str(rec.get("id")) for i, rec in enumerate(kept_records) if str(rec.get("id")) in wanted}


@dataclass
class Located:
    hits: list[BlockHit]
    unproduced: list[str]  # batches of kept copies with no ledger entry
    unrecorded: list[str]  # messages (partition@offset) of those batches with no `spans` header


def locate(kafka: Any, topic: str, corpus: Corpus, ledger_index: Any, copies: Sequence[Copy]) -> Located:
    """The blocks of the topic that hold the kept copies."""
    from pipeline_project.provenance.blocks import batch_messages
    from pipeline_project.streaming.ledger.records import read_ledger_records

    by_batch: dict[str, list[str]] = {}
    for c in copies:
        if c.state == "kept":
            by_batch.setdefault(c.batch, []).append(c.doc_id)
    out = Located([], [], [])
    if not by_batch:
        return out
    records = read_ledger_records(kafka, topic, keys=sorted(by_batch), index=ledger_index)
    for batch, docs in sorted(by_batch.items()):
        entry = records.completed.get(batch) or records.progress.get(batch)
        if entry is None or corpus.manifest(batch) is None:
            out.unproduced.append(batch)
            continue
        # the ordinals of the publication the entry produced (its messages' `pub` header), which a re-clean since
        # may have replaced as the batch's current manifest
        publication = getattr(entry, "content_hash", None) or None
        kept, known = corpus.kept_in(batch, publication)
        ordinals = ordinals_of(kept, docs)
        source = getattr(entry, "source", "") or batch
        # every message of the batch, read whole (the retractions' resolver names them as runs of offsets)
        messages = batch_messages(kafka, topic, {str(p): r for p, r in entry.offsets.items()}, source)
        ours = [m for m in messages if not known or m.publication in (None, publication)]
        read = {(m.partition, m.offset): m for m in ours}
        for key in sorted(read):
            if read[key].spans is None:
                out.unrecorded.append(f"{key[0]}@{key[1]}")
            out.hits += hits_in_message(read[key], ordinals)
    return out
