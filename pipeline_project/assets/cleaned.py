"""`cleaned_shards`: repaired, filtered, PII-masked, deduplicated documents as zstd JSONL shards in S3."""

import hashlib
import io
import json

import dagster as dg
import zstandard
from dagster_aws.s3 import S3Resource

from pipeline_project.assets.partitions import NETWORK_RETRY, batches, latest_materialization_metadata
from pipeline_project.assets.raw import raw_text
from pipeline_project.ingest import iter_batch_items, read_manifest
from pipeline_project.resources.cleaning import CleaningResource
from pipeline_project.resources.layout import PipelineLayout


def _jsonl_zst(records) -> bytes:
    raw = io.BytesIO()
    for rec in records:
        raw.write(json.dumps(rec, ensure_ascii=False).encode())
        raw.write(b"\n")
    return zstandard.ZstdCompressor(level=3).compress(raw.getvalue())


def _load_index(client, layout: PipelineLayout):
    from pipeline_project.cleaning import DedupIndex

    try:
        data = client.get_object(Bucket=layout.bucket, Key=layout.dedup_index_key)["Body"].read()
    except client.exceptions.NoSuchKey:
        return DedupIndex()
    return DedupIndex.from_bytes(data)


def read_shard_manifest(client, layout: PipelineLayout, batch_id: str) -> dict:
    key = f"{layout.shard_dir(batch_id)}manifest.json"
    return json.loads(client.get_object(Bucket=layout.bucket, Key=key)["Body"].read())


@dg.asset(
    partitions_def=batches,
    deps=[raw_text],
    group_name="ingest",
    kinds={"s3", "python"},
    retry_policy=NETWORK_RETRY,
    automation_condition=dg.AutomationCondition.eager(),
    # One cleaning step at a time: the cross-batch dedup index is read, extended and written back.
    pool="dedup_index",
    description="Encoding repair, language ID, quality filters, PII masking, exact + MinHash dedup across "
    "batches. Writes zstd JSONL shards + manifest; every dropped document goes to the exclusion sink with its reason.",
)
def cleaned_shards(
    context: dg.AssetExecutionContext, s3: S3Resource, layout: PipelineLayout, cleaning: CleaningResource
) -> dg.MaterializeResult:
    from pipeline_project.cleaning import CleaningPipeline, write_shards

    batch_id = context.partition_key
    client = s3.get_client()
    config = cleaning.config()
    manifest = read_manifest(client, layout.bucket, batch_id)
    index = _load_index(client, layout)

    result = CleaningPipeline(config).run(iter_batch_items(client, manifest, config), batch_id=batch_id, index=index)
    counts = result.counts
    if counts["in"] != counts["kept"] + counts["dropped"] + counts["quarantined"]:
        raise RuntimeError(f"cleaning lost documents: {counts}")

    shard_dir = layout.shard_dir(batch_id)
    shard_entries = []
    for shard in write_shards(result.kept):
        key = f"{shard_dir}{shard.name}"
        client.put_object(Bucket=layout.bucket, Key=key, Body=shard.data)
        shard_entries.append(
            {
                "key": key,
                "docs": shard.docs,
                "raw_bytes": shard.raw_bytes,
                "bytes": len(shard.data),
                "sha256": hashlib.sha256(shard.data).hexdigest(),
            }
        )

    exclusions_key = f"{layout.exclusions_dir(batch_id)}excluded.jsonl.zst"
    excluded = [
        {"id": d.id, "source": d.source, "kind": "dropped", "step": d.step, "reason": d.reason, "text": d.text}
        for d in result.dropped
    ] + [
        {"id": q.id, "source": q.source, "kind": "quarantined", "step": "read", "reason": q.reason, "detail": q.detail}
        for q in result.quarantined
    ]
    client.put_object(Bucket=layout.bucket, Key=exclusions_key, Body=_jsonl_zst(excluded))

    shard_manifest = {
        "batch_id": batch_id,
        "config_version": config.version,
        "config_hash": config.config_hash(),
        "input_keys": [o.key for o in manifest.objects],
        "counts": counts,
        "shards": shard_entries,
        "exclusions": exclusions_key,
    }
    manifest_bytes = json.dumps(shard_manifest, indent=1, sort_keys=True).encode()
    client.put_object(Bucket=layout.bucket, Key=f"{shard_dir}manifest.json", Body=manifest_bytes)
    client.put_object(Bucket=layout.bucket, Key=layout.dedup_index_key, Body=index.to_bytes())

    dropped_by_reason: dict[str, int] = {}
    for d in result.dropped:
        dropped_by_reason[f"{d.step}:{d.reason.split(':', 1)[0]}"] = (
            dropped_by_reason.get(f"{d.step}:{d.reason.split(':', 1)[0]}", 0) + 1
        )
    for q in result.quarantined:
        dropped_by_reason[f"quarantine:{q.reason}"] = dropped_by_reason.get(f"quarantine:{q.reason}", 0) + 1
    context.log.info(f"batch {batch_id}: {counts}")
    return dg.MaterializeResult(
        metadata={
            "documents_in": counts["in"],
            "kept": counts["kept"],
            "dropped": counts["dropped"],
            "quarantined": counts["quarantined"],
            "dropped_by_reason": dropped_by_reason,
            "removal_table": dg.MetadataValue.md(result.removal_table_markdown()),
            "bytes_out": sum(s["bytes"] for s in shard_entries),
            "raw_bytes_kept": sum(s["raw_bytes"] for s in shard_entries),
            "shard_keys": [s["key"] for s in shard_entries],
            "exclusions": dg.MetadataValue.path(f"s3://{layout.bucket}/{exclusions_key}"),
            "config_hash": config.config_hash(),
            "manifest_sha256": hashlib.sha256(manifest_bytes).hexdigest(),
            "dedup_index_entries": index.stats["entries"],
        }
    )


@dg.asset_check(
    asset=cleaned_shards,
    partitions_def=batches,
    blocking=True,
    description="documents in == kept + dropped + quarantined, in the metadata and in the shard manifest.",
)
def cleaned_counts_add_up(
    context: dg.AssetCheckExecutionContext, s3: S3Resource, layout: PipelineLayout
) -> dg.AssetCheckResult:
    meta = latest_materialization_metadata(context.instance, cleaned_shards.key, context.partition_key)
    manifest = read_shard_manifest(s3.get_client(), layout, context.partition_key)
    c = manifest["counts"]
    ok = (
        c["in"] == c["kept"] + c["dropped"] + c["quarantined"]
        and meta.get("documents_in") == c["in"]
        and sum(s["docs"] for s in manifest["shards"]) == c["kept"]
    )
    return dg.AssetCheckResult(passed=bool(ok), metadata={"counts": c})


@dg.asset_check(
    asset=cleaned_shards,
    partitions_def=batches,
    blocking=True,
    description="Every shard downloads, matches its sha256 and decodes to the documents it claims.",
)
def cleaned_shards_readable(
    context: dg.AssetCheckExecutionContext, s3: S3Resource, layout: PipelineLayout
) -> dg.AssetCheckResult:
    from pipeline_project.cleaning import read_shard

    client = s3.get_client()
    manifest = read_shard_manifest(client, layout, context.partition_key)
    problems = []
    for entry in manifest["shards"]:
        data = client.get_object(Bucket=layout.bucket, Key=entry["key"])["Body"].read()
        if hashlib.sha256(data).hexdigest() != entry["sha256"]:
            problems.append(f"{entry['key']}: sha256 differs")
            continue
        n = sum(1 for rec in read_shard(data) if isinstance(rec.get("text"), str))
        if n != entry["docs"]:
            problems.append(f"{entry['key']}: {n} docs, manifest says {entry['docs']}")
    return dg.AssetCheckResult(passed=not problems, metadata={"shards": len(manifest["shards"]), "problems": problems})
