"""Reading a published batch's attributes for a retune, and writing the retuned batch (`retune --write`).

A retuned batch is a new publication of the same batch: shards without the documents the new thresholds drop
(rewritten from the published shards: the cleaned text, never the raw text), an exclusion sink with the old
records plus theirs (their shard text, already masked), an attribute file with their new decisions, and last a
manifest naming these, with the new config hash and `retuned_from`. It keeps the batch's dedup attempt.
The documents it drops leave the cross-batch dedup index (`forget_documents`: their rows under that attempt,
and by cascade their exact and band keys) before the manifest is written, so later copies of them are no
longer dropped as duplicates of something no longer kept. A crash between the two leaves the batch as it was
and its dropped documents out of the index: a later copy can be kept a second time, never lost (the index's
own preference). What stays: a MinHash band key a dropped document held is freed, not handed to another kept
document that shares it (band keys keep their first owner), so a later near copy of that one can be missed on
that band.

A batch already produced (a ledger entry) is refused by `check_writable` unless the caller retracts the blocks
of the documents it drops (`retracts`: `ops.retune` does, through `streaming/retractions`) and keeps the old
publication's objects (`delete_old=False`: its blocks in the topic still name it).
"""

from __future__ import annotations

import io
import json
import uuid
from collections.abc import Callable, Sequence

import pyarrow as pa
import pyarrow.parquet as pq
import zstandard

from pipeline_project.cleaning.config import CleaningConfig
from pipeline_project.cleaning.errors import CleaningError
from pipeline_project.cleaning.output.attributes import ATTRIBUTES_NAME, DUP_STEPS, read_attributes, sha256
from pipeline_project.cleaning.output.publish import (
    EXCLUSIONS_NAME,
    ShardEntry,
    ShardManifest,
    delete_superseded,
    write_manifest,
)
from pipeline_project.cleaning.output.shards import read_shard
from pipeline_project.cleaning.retune.decide import BatchRetune


class RetuneRefusedError(CleaningError):
    """The batch cannot be rewritten by a retune (produced already, undecidable documents, no attributes)."""


def load_attributes(client, bucket: str, manifest: ShardManifest) -> tuple[pa.Table, CleaningConfig]:
    if not manifest.attributes:
        raise RetuneRefusedError(
            f"batch {manifest.batch_id} has no attribute file (cleaned before attributes were kept): re-clean it"
        )
    data = client.get_object(Bucket=bucket, Key=manifest.attributes)["Body"].read()
    if manifest.attributes_sha256 and sha256(data) != manifest.attributes_sha256:
        raise RetuneRefusedError(f"batch {manifest.batch_id}: attribute file differs from its sha256 in the manifest")
    return read_attributes(data)


def check_writable(result: BatchRetune, produced: str | None, *, retracts: bool = False) -> None:
    """Refuses what cannot be written; a produced batch only when the caller does not retract its blocks."""
    b = result.batch_id
    if produced and not retracts:
        raise RetuneRefusedError(
            f"batch {b} is already produced to Kafka ({produced}); a retune cannot change blocks in the topic. "
            f"Retire its ledger entry first: pipeline-project ledger retire {b} --reason TEXT"
        )
    if result.undecidable():
        raise RetuneRefusedError(f"batch {b}: {result.undecidable()} documents need a re-clean; not writing it")
    if result.newly_kept():
        raise RetuneRefusedError(f"batch {b}: {len(result.newly_kept())} documents would be kept again; re-clean it")


Forget = Callable[[str, list[str]], int]  # (dedup attempt, doc ids) -> index rows removed


def forget_documents(urls: str | Sequence[str], schema: str = "dedup") -> Forget:
    """A `Forget` on the PostgreSQL dedup index in `urls` (its one database, or every shard of a sharded index,
    `cleaning.dedup.opening.index_urls`): deletes the documents' rows of the attempt wherever they were placed
    (their keys; handovers cascade) and returns how many went. Idempotent."""
    databases = [urls] if isinstance(urls, str) else list(urls)

    def forget(attempt: str, doc_ids: list[str]) -> int:
        from pipeline_project.cleaning.dedup.attempts import forget_rows
        from pipeline_project.cleaning.dedup.postgres import PostgresDedupIndex

        removed = 0
        for url in databases:
            index = PostgresDedupIndex(url, schema=schema)
            try:
                with index.cursor() as cur:
                    removed += forget_rows(cur, attempt, doc_ids)
            finally:
                index.close()
        return removed

    return forget


def write_retuned(
    client,
    bucket: str,
    shard_dir: str,
    manifest: ShardManifest,
    table: pa.Table,
    result: BatchRetune,
    config: CleaningConfig,
    forget: Forget | None = None,
    *,
    delete_old: bool = True,
) -> ShardManifest:
    """Publish the retuned batch (see the module docstring); returns the new manifest. `forget`: how the
    dropped documents leave the dedup index (None: they stay, as for a batch cleaned without the index).
    `delete_old`: delete the objects of the old publication the new one does not name (False: a produced one)."""
    dropped = result.newly_dropped()
    prefix = f"{shard_dir}retune-{uuid.uuid4().hex[:8]}/"
    shards, sink = [], []
    for entry in manifest.shards:
        records = list(read_shard(client.get_object(Bucket=bucket, Key=entry.key)["Body"].read()))
        sink += [_sink_record(r, dropped[r["id"]]) for r in records if r["id"] in dropped]
        kept = [r for r in records if r["id"] not in dropped]
        if kept:
            shards.append(_put_shard(client, bucket, f"{prefix}shard-{len(shards):05d}.jsonl.zst", kept))
    old_sink = client.get_object(Bucket=bucket, Key=manifest.exclusions)["Body"].read()
    new_sink = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(old_sink)).read()
    new_sink += b"".join((json.dumps(r, ensure_ascii=False) + "\n").encode() for r in sink)
    exclusions = f"{prefix}{EXCLUSIONS_NAME}"
    client.put_object(Bucket=bucket, Key=exclusions, Body=zstandard.ZstdCompressor(level=3).compress(new_sink))
    attributes = _retuned_attributes(table, result, config)
    client.put_object(Bucket=bucket, Key=f"{prefix}{ATTRIBUTES_NAME}", Body=attributes)
    counts = dict(manifest.counts)
    counts["kept"] -= len(dropped)
    counts["dropped"] += len(dropped)
    new = ShardManifest.model_validate(
        {
            **manifest.model_dump(),
            "config_version": config.version,
            "config_hash": config.config_hash(),
            "counts": counts,
            "shards": tuple(shards),
            "exclusions": exclusions,
            "attributes": f"{prefix}{ATTRIBUTES_NAME}",
            "attributes_sha256": sha256(attributes),
            "retuned_from": manifest.retuned_from or manifest.config_hash,
        }
    )
    if forget is not None and manifest.dedup_attempt and dropped:
        forget(manifest.dedup_attempt, sorted(dropped))
    write_manifest(client, bucket, shard_dir, new)
    if delete_old:
        delete_superseded(client, bucket, manifest, new)
    return new


def _sink_record(record: dict, outcome) -> dict:
    return {
        "id": record["id"],
        "source": record.get("source", ""),
        "kind": "dropped",
        "step": outcome.step,
        "reason": outcome.reason,
        "text": record["text"],
        "retuned": True,
    }


def _put_shard(client, bucket: str, key: str, records: list[dict]) -> ShardEntry:
    raw = b"".join((json.dumps(r, ensure_ascii=False, default=str) + "\n").encode("utf-8") for r in records)
    data = zstandard.ZstdCompressor(level=3).compress(raw)
    client.put_object(Bucket=bucket, Key=key, Body=data)
    return ShardEntry(key=key, docs=len(records), raw_bytes=len(raw), bytes=len(data), sha256=sha256(data))


def _retuned_attributes(table: pa.Table, result: BatchRetune, config: CleaningConfig) -> bytes:
    rows = table.to_pylist()
    for row, outcome in zip(rows, result.outcomes):  # every one decided (check_writable), under the new config
        if outcome.decision == "dropped":
            row.update(decision="dropped", step=outcome.step, reason=outcome.reason)
            if outcome.step not in DUP_STEPS:
                row.update(dup_of=None, dup_kind=None)
    meta = dict(table.schema.metadata or {})
    meta[b"pipeline_project.cleaning_config"] = config.model_dump_json().encode()
    out = pa.BufferOutputStream()
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema.with_metadata(meta)), out, compression="zstd")
    return out.getvalue().to_pybytes()
