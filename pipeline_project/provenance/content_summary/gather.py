"""`SummaryInputs` from the stores: the checkpoint's step logs (which batches), the ledger (offsets, tokens, domains,
FIM), the batch manifests (raw objects), the shard manifests and their attribute files (every document's decision;
the cleaning config used), and the retractions topic. Reads only."""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pipeline_project.provenance.content_summary.model import (
    BatchInput,
    DocKey,
    Provider,
    RetractionInput,
    SummaryInputs,
    reason_head,
)
from pipeline_project.provenance.content_summary.trained import (
    Ranges,
    Trained,
    attribute,
    read_trained,
    trained_retracted,
)

RETIRED = "\0retired\0"  # a retired record's label in `attribute`'s ranges: <key><RETIRED><n>


@dataclass
class Stores:
    s3: Any
    bucket: str
    kafka: Any  # streaming.kafka.client.KafkaSettings
    topic: str  # the token topic, when the step logs do not name one
    checkpoints_root: str = "checkpoints/"
    shards_prefix: str = "shards/"
    raw_prefix: str = "raw/"
    ledger_index: Any = None  # not used: a summary reads every record of the ledger


def _tally_attributes(data: bytes) -> tuple[Counter[DocKey], dict[str, Any]]:
    from pipeline_project.cleaning.output.attributes import read_attributes

    table, config = read_attributes(data)
    cols = table.select(["source", "domain", "lang", "decision", "step", "reason"]).to_pydict()
    tally: Counter[DocKey] = Counter()
    for src, dom, lang, dec, step, reason in zip(*cols.values(), strict=True):
        kept = dec == "kept"
        tally[DocKey(src or "", dom or "", lang or "", dec, "" if kept else step or "", reason_head(reason))] += 1
    return tally, {config.config_hash(): config.model_dump(mode="json")}


def _tally_records(s3: Any, bucket: str, manifest: Any) -> Counter[DocKey]:
    """Older publications without an attribute file: the shards' kept records and the exclusion sink's."""
    from pipeline_project.cleaning.output.shards import read_shard

    tally: Counter[DocKey] = Counter()
    for key in [s.key for s in manifest.shards] + [manifest.exclusions]:
        for rec in read_shard(s3.get_object(Bucket=bucket, Key=key)["Body"].read()):
            kind = rec.get("kind", "kept")
            lang = (rec.get("meta") or {}).get("lang") or ""
            step = "" if kind == "kept" else rec.get("step") or ""
            tally[
                DocKey(
                    rec.get("source") or "", rec.get("domain") or "", lang, kind, step, reason_head(rec.get("reason"))
                )
            ] += 1
    return tally


def batch_input(stores: Stores, batch: str, produced: dict[str, Any] | None, configs: dict) -> BatchInput:
    """One batch as the stores hold it: the publication the ledger record names (archived after a re-clean)."""
    from pipeline_project.ingest.manifest import ManifestNotFoundError, read_manifest
    from pipeline_project.provenance.publications import publication_manifest

    s3, bucket = stores.s3, stores.bucket
    out = BatchInput(batch, produced=produced)
    with contextlib.suppress(ManifestNotFoundError):
        out.objects = read_manifest(s3, bucket, batch).objects
    shard = publication_manifest(s3, bucket, f"{stores.shards_prefix}{batch}/", (produced or {}).get("content_hash"))
    if shard is None:
        return out
    out.counts, out.config_hash = dict(shard.counts), shard.config_hash
    try:
        if shard.attributes:
            tally, config = _tally_attributes(s3.get_object(Bucket=bucket, Key=shard.attributes)["Body"].read())
            out.tally = tally
            configs.update(config)
        else:
            out.tally = _tally_records(s3, bucket, shard)
    except s3.exceptions.NoSuchKey:
        out.tally = None  # superseded and deleted: the manifest's counts stand alone
    return out


def _ledger_ranges(records: Any) -> tuple[dict[str, Ranges], dict[str, dict[str, Any]]]:
    """(label -> offset ranges, label -> the record as a dict) over completion, progress and retired records."""
    from dataclasses import asdict

    ranges: dict[str, Ranges] = {}
    body: dict[str, dict[str, Any]] = {}
    for key, rec in {**records.progress, **records.completed}.items():
        ranges[key], body[key] = rec.offsets, asdict(rec)
    for key, log in records.retired.items():
        for i, r in enumerate(log):
            label = f"{key}{RETIRED}{i}"
            ranges[label], body[label] = r.offsets, dict(r.record)
    return ranges, body


def _retractions(index: Any, trained: Trained) -> list[RetractionInput]:
    out = []
    for rid, r in sorted(index.requests.items()):
        named = [b for b in r.blocks if b.end is not None and b.last_offset is None]
        whole = [b for b in r.blocks if b not in named]
        out.append(
            RetractionInput(
                request_id=rid,
                reason=r.reason,
                blocks=sum(b.end - b.first for b in named),
                whole_messages=sum(
                    (b.last_offset if b.last_offset is not None else b.offset) - b.offset + 1 for b in whole
                ),
                passed_over=trained.passed_over.get(rid, 0),
                trained_before=trained_retracted(trained.runs, r.blocks),
            )
        )
    return out


def _resolver(kafka: Any, topic: str):
    def resolve(addresses: Iterable[tuple[int, int]]) -> dict[tuple[int, int], str]:
        from pipeline_project.provenance.trace import read_messages

        return {a: m.batch for a, m in read_messages(kafka, topic, addresses).items()}

    return resolve


def gather(
    stores: Stores,
    lineage: str,
    step: int | None = None,
    *,
    provider: Provider | None = None,
    fim: dict[str, Any] | None = None,
    source_depth: int = 1,
) -> SummaryInputs:
    """The inputs of the summary of `lineage` at its checkpoint of `step` (default: its newest)."""
    from pipeline_project.streaming.ledger.records import read_ledger_records
    from pipeline_project.streaming.retractions.topic import read_retractions
    from pipeline_project.training.checkpoint.lineages import resolve_checkpoint

    ref = resolve_checkpoint(stores.s3, stores.bucket, stores.checkpoints_root, lineage, step)
    trained = read_trained(stores.s3, stores.bucket, ref.uri)
    topic = trained.topic or stores.topic
    ranges, records = _ledger_ranges(read_ledger_records(stores.kafka, topic))
    owner = attribute(trained.blocks_by_message(), ranges, _resolver(stores.kafka, topic))
    blocks: Counter[str] = Counter()
    unattributed = 0
    for message, n in trained.blocks_by_message().items():
        if owner.get(message) is None:
            unattributed += n
        else:
            blocks[owner[message]] += n
    configs: dict[str, dict[str, Any]] = {}
    batches: dict[str, BatchInput] = {}
    for label, n in sorted(blocks.items()):
        key, retired = label.split(RETIRED)[0], RETIRED in label
        if key not in batches:
            batches[key] = batch_input(stores, key, records.get(label), configs)
        batches[key].trained_blocks += n
        batches[key].retired = batches[key].retired or retired
    return SummaryInputs(
        lineage=lineage,
        checkpoint_step=ref.step,
        checkpoint_uri=ref.uri,
        checkpoint_created_at=ref.created_at,
        topic=topic,
        seq_len=trained.seq_len,
        batches=list(batches.values()),
        configs=configs,
        retractions=_retractions(read_retractions(stores.kafka, topic), trained),
        unattributed_blocks=unattributed,
        steps_read=trained.checkpoints,
        raw_prefix=stores.raw_prefix,
        source_depth=source_depth,
        fim=fim or {},
        provider=provider or Provider(),
    )
