"""`cleaned_shards`: repaired, filtered, PII-masked, deduplicated documents as zstd JSONL shards in S3."""

import dagster as dg
from dagster_aws.s3 import S3Resource

from pipeline_project.assets.partitions import NETWORK_RETRY, batches, latest_materialization_metadata
from pipeline_project.assets.raw import raw_text
from pipeline_project.ingest import iter_batch_items, read_manifest
from pipeline_project.resources.cleaning import CleaningResource
from pipeline_project.resources.kafka import KafkaResource
from pipeline_project.resources.layout import PipelineLayout


def refuse_other_content(produced, manifest_sha256: str, batch_id: str, topic: str) -> None:
    """`token_blocks` refuses a batch whose ledger entry records other content: refuse it here first, before
    anything is written, so the shards, the manifest and the dedup index keep what was produced."""
    if produced is not None and produced.content_hash != manifest_sha256:
        raise dg.Failure(
            description=f"batch {batch_id} is already in topic {topic} (ledger content {produced.content_hash[:12]} "
            f"at offsets {dict(produced.offsets)}); cleaning it again gives other content ({manifest_sha256[:12]}), "
            "which token_blocks would refuse. Nothing was written: the published shards and the dedup index "
            "still match the blocks in the topic. Clean changed input as a new batch.",
            metadata={"ledger_content_hash": produced.content_hash, "manifest_sha256": manifest_sha256},
            allow_retries=False,
        )


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
    context: dg.AssetExecutionContext,
    s3: S3Resource,
    layout: PipelineLayout,
    cleaning: CleaningResource,
    kafka: KafkaResource,
) -> dg.MaterializeResult:
    from pipeline_project.cleaning import CleaningPipeline, load_index, save_index
    from pipeline_project.cleaning.publish import prepare_batch, write_prepared

    batch_id = context.partition_key
    client = s3.get_client()
    config = cleaning.config()
    manifest = read_manifest(client, layout.bucket, batch_id)
    index = load_index(client, layout.bucket, layout.dedup_index_key)

    # Order of the writes: nothing (index commit, shards, manifest, index file) before the token ledger says
    # this content may be published; then the shards, the manifest last, then the index.
    pipeline = CleaningPipeline(config)
    items = iter_batch_items(client, manifest, config)
    result = pipeline.run(items, batch_id=batch_id, index=index, commit=False)  # lookups only

    def prepare():
        return prepare_batch(
            batch_id=batch_id,
            shard_dir=layout.shard_dir(batch_id),
            exclusions_dir=layout.exclusions_dir(batch_id),
            result=result,
            config=config,
            input_keys=[o.key for o in manifest.objects],
        )

    produced = kafka.ledger_entry(layout.topic, batch_id)
    if produced is not None:
        refuse_other_content(produced, prepare().manifest_sha256, batch_id, layout.topic)
    pipeline.commit(result)
    result.check_counts()
    prepared = prepare()
    if produced is not None:  # documents another batch committed first (late drops) change the content
        refuse_other_content(produced, prepared.manifest_sha256, batch_id, layout.topic)
    published = write_prepared(client, layout.bucket, prepared)
    save_index(client, layout.bucket, layout.dedup_index_key, index)

    shards = published.manifest
    context.log.info(f"batch {batch_id}: {result.counts}")
    return dg.MaterializeResult(
        metadata={
            "documents_in": result.counts["in"],
            "kept": result.counts["kept"],
            "dropped": result.counts["dropped"],
            "quarantined": result.counts["quarantined"],
            "dropped_by_reason": result.dropped_by_reason(),
            "removal_table": dg.MetadataValue.md(result.removal_table_markdown()),
            "bytes_out": shards.bytes_out,
            "raw_bytes_kept": shards.raw_bytes_kept,
            "shard_keys": [s.key for s in shards.shards],
            "exclusions": dg.MetadataValue.path(f"s3://{layout.bucket}/{shards.exclusions}"),
            "config_hash": shards.config_hash,
            "manifest_sha256": published.manifest_sha256,
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
    from pipeline_project.cleaning import read_shard_manifest

    meta = latest_materialization_metadata(context.instance, cleaned_shards.key, context.partition_key)
    manifest = read_shard_manifest(s3.get_client(), layout.bucket, layout.shard_dir(context.partition_key))
    c = manifest.counts
    ok = (
        c["in"] == c["kept"] + c["dropped"] + c["quarantined"]
        and meta.get("documents_in") == c["in"]
        and sum(s.docs for s in manifest.shards) == c["kept"]
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
    from pipeline_project.cleaning import read_shard_manifest, verify_published

    client = s3.get_client()
    manifest = read_shard_manifest(client, layout.bucket, layout.shard_dir(context.partition_key))
    problems = verify_published(client, layout.bucket, manifest)
    return dg.AssetCheckResult(passed=not problems, metadata={"shards": len(manifest.shards), "problems": problems})
