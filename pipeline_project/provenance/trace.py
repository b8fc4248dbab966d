"""Provenance: from a training step (or a Kafka message) back to the documents and raw objects it came from.

Three records make the answer a lookup, not a re-run:

* `provenance/steps.json` in every checkpoint (`training.step_log`): per step and rank, the runs of blocks read,
  `[partition, offset, first block, count]`, and the checkpoint before it in the lineage;
* the `spans` header of every message (`spans`): per piece of document in the message, the document's ordinal
  in its batch, its token range, and whether FIM rearranged it; the `src` header names the batch, and the `pub`
  header the publication (the produced shard manifest's content hash) the ordinals index;
* that publication's shard manifest (`publications`: the batch's current one, or the copy archived when it was
  produced, after a re-clean or a retune rewrote the batch; a message without `pub`, produced before the header
  was written, resolves against the current manifest, as it always did): the ordinal is the document's position
  in the publication's shards, and its shard
  record holds its id (`<raw key>#<line>` for JSON Lines, the key for a whole-file document), the raw key, the
  domain and the cleaning decisions (`meta`: language and score, PII / secrets masked, boilerplate stripped,
  encoding repairs, JSONL fields); the batch's attribute file (`cleaning.attributes`), when it has one, gives the
  document's quality signals and decision row.

`trace_step` and `trace_message` return plain JSON-able dicts (the CLI prints them). No Dagster here.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from confluent_kafka import KafkaError, TopicPartition

from pipeline_project.common.s3 import key_in_bucket
from pipeline_project.streaming.kafka.client import KafkaSettings
from pipeline_project.streaming.kafka.format import PAD_TOKEN, decode_blocks
from pipeline_project.streaming.kafka.spans import H_SPANS, Span, SpansNotRecorded, decode_spans, spans_of_block

STEPS_FILE = "provenance/steps.json"  # = training.step_log.STEPS_FILE (that module imports torch-free code only)


class ProvenanceError(LookupError):
    """The record asked for is not there (a step not trained in the lineage, an offset with no message)."""


@dataclass(frozen=True)
class StepRecord:
    checkpoint: str  # the checkpoint whose steps.json holds the step
    topic: str
    seq_len: int
    runs: list[list[int]]  # [partition, offset, first block, count]


def _read_json(s3: Any, bucket: str, key: str) -> dict[str, Any] | None:
    try:
        return json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
    except s3.exceptions.NoSuchKey:
        return None


def _key_of(uri: str, bucket: str) -> str:
    return key_in_bucket(uri, bucket).rstrip("/")


def step_record(
    s3: Any, bucket: str, step: int, rank: int, *, checkpoint_prefix: str | None = None, checkpoint: str | None = None
) -> StepRecord:
    """The blocks `rank` trained at `step`, found by walking the lineage back from `latest.json` under
    `checkpoint_prefix` (or from the `checkpoint` URI given)."""
    from pipeline_project.training.checkpoint.ref import LATEST_FILE, parse_ref  # torch-free

    if checkpoint is None:
        prefix = (checkpoint_prefix or "").strip("/")
        try:
            raw = s3.get_object(Bucket=bucket, Key=f"{prefix}/{LATEST_FILE}")["Body"].read()
        except s3.exceptions.NoSuchKey:
            raise ProvenanceError(f"no checkpoint under s3://{bucket}/{prefix}/") from None
        checkpoint = parse_ref(raw, bucket, prefix).uri
    uri: str | None = checkpoint
    while uri is not None:
        body = _read_json(s3, bucket, f"{_key_of(uri, bucket)}/{STEPS_FILE}")
        if body is None:
            raise ProvenanceError(f"{uri} has no {STEPS_FILE} (saved before step positions were recorded)")
        if step > body["last_step"] and uri == checkpoint:
            raise ProvenanceError(f"step {step} is after the lineage's last checkpoint (step {body['last_step']})")
        if step >= body["first_step"]:
            ranks = body["ranks"]
            if not 0 <= rank < len(ranks):
                raise ProvenanceError(f"rank {rank} not in the world of size {len(ranks)} that trained step {step}")
            return StepRecord(uri, body["topic"], int(body["seq_len"]), ranks[rank][str(step)])
        uri = body.get("previous")
    raise ProvenanceError(f"step {step} is before the first checkpoint of the lineage")


@dataclass
class Message:
    partition: int
    offset: int
    batch: str  # the `src` header: the ledger key, the batch id of a published batch
    domain: str | None
    seq_len: int
    blocks: np.ndarray  # (n, seq_len) uint32
    spans: list[Span] | None  # None: not recorded
    publication: str | None = None  # the `pub` header; None: produced before it was written


def read_messages(
    kafka: KafkaSettings, topic: str, wanted: Iterable[tuple[int, int]], timeout_s: float = 30.0
) -> dict[tuple[int, int], Message]:
    """The committed messages at (partition, offset), read with one consumer; ProvenanceError for a missing one."""
    wanted = sorted(set(wanted))
    wanted_set = set(wanted)
    found: dict[tuple[int, int], Message] = {}
    consumer = kafka.make_consumer(overrides={"enable.partition.eof": True, "isolation.level": "read_committed"})
    try:
        for p, offset in wanted:
            if (p, offset) in found:
                continue
            consumer.assign([TopicPartition(topic, p, offset)])
            deadline = time.monotonic() + timeout_s
            while (p, offset) not in found:
                if time.monotonic() > deadline:
                    raise ProvenanceError(f"{topic}[{p}]@{offset}: no committed message read in {timeout_s:g}s")
                for msg in consumer.consume(64, timeout=0.5):
                    if msg.error() is not None:
                        # an end-of-partition event at or before the offset: nothing committed there
                        eof = msg.error().code() == KafkaError._PARTITION_EOF
                        if eof and msg.partition() == p and 0 <= msg.offset() <= offset:
                            raise ProvenanceError(f"{topic}[{p}]@{offset}: past the end of the partition")
                        continue
                    if (p, msg.offset()) in wanted_set:
                        found[(p, msg.offset())] = message_of(topic, msg)
                    if msg.offset() > offset and (p, offset) not in found:
                        raise ProvenanceError(f"{topic}[{p}]@{offset}: no message there (a transaction marker?)")
    finally:
        consumer.close()
    return found


def message_of(topic: str, msg: Any) -> Message:
    """One consumed record as a `Message` (headers checked, spans and publication read)."""
    header, blocks = decode_blocks(
        msg.value(), msg.headers(), topic=topic, partition=msg.partition(), offset=msg.offset()
    )
    raw = dict((k, v) for k, v in msg.headers() or () if v is not None)
    try:
        spans = decode_spans(raw.get(H_SPANS))
    except SpansNotRecorded:
        spans = None
    return Message(
        msg.partition(), msg.offset(), header.source, header.domain, header.seq_len, blocks, spans, header.publication
    )


class DocumentCatalog:
    """The published batches' documents by ordinal: each publication's manifest and shards read from S3 once.

    A publication is a (batch, content hash) pair; a content hash of None is the batch's current manifest (a
    message without the `pub` header)."""

    def __init__(self, s3: Any, bucket: str, shards_prefix: str = "shards/"):
        self.s3, self.bucket, self.shards_prefix = s3, bucket, shards_prefix
        self._batches: dict[tuple[str, str | None], tuple[Any, list[tuple[str, int]], dict[int, dict]]] = {}
        self._attribute_rows: dict[tuple[str, str | None], dict[str, dict]] = {}

    def _batch(self, batch: str, publication: str | None) -> tuple[Any, list[tuple[str, int]], dict[int, dict]]:
        if (batch, publication) not in self._batches:
            from pipeline_project.provenance.publications import publication_manifest

            shard_dir = f"{self.shards_prefix}{batch}/"
            manifest = publication_manifest(self.s3, self.bucket, shard_dir, publication)
            if manifest is None and publication is None:
                raise ProvenanceError(f"batch {batch} has no shard manifest under s3://{self.bucket}/{shard_dir}")
            if manifest is None:
                raise ProvenanceError(
                    f"batch {batch}: publication {publication} is neither its current manifest nor archived under "
                    f"s3://{self.bucket}/{shard_dir}publications/ (produced before publications were archived?)"
                )
            where = [(e.key, i) for e in manifest.shards for i in range(e.docs)]
            self._batches[(batch, publication)] = (manifest, where, {})
        return self._batches[(batch, publication)]

    def document(self, batch: str, ordinal: int, publication: str | None = None) -> dict[str, Any]:
        manifest, where, records = self._batch(batch, publication)
        if not 0 <= ordinal < len(where):
            raise ProvenanceError(f"batch {batch} has {len(where)} documents, no ordinal {ordinal}")
        shard_key, position = where[ordinal]
        if ordinal not in records:
            self._load_shard(shard_key, ordinal - position, records)
        rec = records[ordinal]
        doc_id = str(rec.get("id"))
        key, _, line = doc_id.partition("#")
        return {
            "batch": batch,
            "ordinal": ordinal,
            "publication": manifest.content_hash(),
            "shard": f"s3://{self.bucket}/{shard_key}",
            "shard_position": position,
            "id": doc_id,
            "object": f"s3://{self.bucket}/{rec.get('source') or key}",
            "line": int(line) if line.isdigit() else None,  # JSON Lines: the line (from 1); None: the whole object
            "domain": rec.get("domain"),
            "cleaning": {k: v for k, v in (rec.get("meta") or {}).items() if k != "fields"},
            "fields": (rec.get("meta") or {}).get("fields", {}),
            "cleaning_config_hash": manifest.config_hash,
            "text_chars": len(rec.get("text") or ""),
            "attributes": self._attributes((batch, publication), manifest).get(doc_id),  # None: no attribute file
        }

    def _attributes(self, batch: tuple[str, str | None], manifest: Any) -> dict[str, dict]:
        """The publication's attribute rows (quality signals, decision) by document id, read once per publication."""
        if batch not in self._attribute_rows:
            rows: dict[str, dict] = {}
            if getattr(manifest, "attributes", ""):
                from pipeline_project.cleaning.output.attributes import read_attributes

                data = self.s3.get_object(Bucket=self.bucket, Key=manifest.attributes)["Body"].read()
                table, _config = read_attributes(data)
                for row in table.to_pylist():
                    rows[row["doc_id"]] = {k: v for k, v in row.items() if v is not None}
            self._attribute_rows[batch] = rows
        return self._attribute_rows[batch]

    def text(self, batch: str, ordinal: int, publication: str | None = None) -> str:
        self.document(batch, ordinal, publication)
        return self._batches[(batch, publication)][2][ordinal]["text"]

    def _load_shard(self, shard_key: str, first_ordinal: int, records: dict[int, dict]) -> None:
        from pipeline_project.cleaning.output.shards import read_shard

        data = self.s3.get_object(Bucket=self.bucket, Key=shard_key)["Body"].read()
        for i, rec in enumerate(read_shard(data)):
            records[first_ordinal + i] = rec


def trace_blocks(
    kafka: KafkaSettings,
    catalog: DocumentCatalog,
    topic: str,
    runs: Sequence[Sequence[int]],
    timeout_s: float = 30.0,
) -> dict[str, Any]:
    """For each run [partition, offset, first block, count]: each block's token spans and their documents
    (a count of -1: every block of the message from the first)."""
    messages = read_messages(kafka, topic, [(int(r[0]), int(r[1])) for r in runs], timeout_s)
    blocks, documents = [], {}
    for p, offset, first, count in runs:
        msg = messages[(int(p), int(offset))]
        last = len(msg.blocks) if int(count) < 0 else int(first) + int(count)
        for b in range(int(first), last):
            blocks.append(_block(msg, b, catalog, documents))
    return {"blocks": blocks, "documents": documents}


def _block(msg: Message, b: int, catalog: DocumentCatalog, documents: dict[str, Any]) -> dict[str, Any]:
    row = msg.blocks[b]
    out: dict[str, Any] = {"partition": msg.partition, "offset": msg.offset, "block": b, "batch": msg.batch,
                           "publication": msg.publication, "domain": msg.domain,
                           "pad_tokens": int(np.count_nonzero(row == PAD_TOKEN))}  # fmt: skip
    if msg.spans is None:
        out["spans"] = None  # not recorded for this message
        return out
    spans = []
    for at, s in spans_of_block(msg.spans, msg.seq_len, b):
        # a document of another publication of the batch is another document: the ref names the publication
        ref = (
            f"{msg.batch}/{s.ordinal}" if msg.publication is None else f"{msg.batch}@{msg.publication[:16]}/{s.ordinal}"
        )
        if ref not in documents:
            documents[ref] = catalog.document(msg.batch, s.ordinal, msg.publication)
        spans.append(
            {
                "block_tokens": [at, at + s.count],
                "document": ref,
                "document_tokens": [s.first, s.first + s.count],
                "fim": s.fim,
            }
        )
    out["spans"] = spans
    return out


def trace_step(
    kafka: KafkaSettings,
    s3: Any,
    bucket: str,
    step: int,
    rank: int = 0,
    *,
    checkpoint_prefix: str | None = None,
    checkpoint: str | None = None,
    shards_prefix: str = "shards/",
) -> dict[str, Any]:
    record = step_record(s3, bucket, step, rank, checkpoint_prefix=checkpoint_prefix, checkpoint=checkpoint)
    traced = trace_blocks(kafka, DocumentCatalog(s3, bucket, shards_prefix), record.topic, record.runs)
    return {
        "checkpoint": record.checkpoint,
        "step": step,
        "rank": rank,
        "topic": record.topic,
        "seq_len": record.seq_len,
        "runs": record.runs,
        **traced,
    }


def trace_message(
    kafka: KafkaSettings,
    s3: Any,
    bucket: str,
    topic: str,
    partition: int,
    offset: int,
    *,
    shards_prefix: str = "shards/",
) -> dict[str, Any]:
    runs = [[partition, offset, 0, -1]]
    traced = trace_blocks(kafka, DocumentCatalog(s3, bucket, shards_prefix), topic, runs)
    return {"topic": topic, "runs": runs, **traced}
