"""`cleaned_shards`: repaired, filtered, PII-masked, deduplicated documents as zstd JSONL shards in S3."""

import dagster as dg
from dagster_aws.s3 import S3Resource

from pipeline_project.cleaning.read.batch import iter_batch_items
from pipeline_project.defs.assets.raw import raw_text
from pipeline_project.defs.partitions import NETWORK_RETRY, batches, latest_materialization_metadata
from pipeline_project.defs.resources.cleaning import CleaningResource
from pipeline_project.defs.resources.dedup import DedupIndexResource
from pipeline_project.defs.resources.kafka import KafkaResource
from pipeline_project.defs.resources.layout import PipelineLayout
from pipeline_project.defs.resources.locks import BatchLocks
from pipeline_project.defs.resources.pushgateway import PushgatewayResource
from pipeline_project.ingest.manifest import read_manifest


def refuse_other_content(records, content_hash: str, batch_id: str, topic: str) -> None:
    """`token_blocks` refuses a batch whose ledger entry (completed, or partly produced) records other content, or
    whose content was retired: refuse it here first, before the index or the published manifest change, so both
    keep matching the blocks in the topic."""
    from pipeline_project.streaming.ledger.checks import refusal_for_content

    why = refusal_for_content(records, batch_id, content_hash)
    if why is not None:
        raise dg.Failure(
            description=f"batch {batch_id} of topic {topic}: {why}. token_blocks would refuse it, so nothing was "
            "published: the shard manifest and the dedup index still match the blocks in the topic.",
            metadata={"content_hash": content_hash},
            allow_retries=False,
        )


@dg.asset(
    partitions_def=batches,
    code_version="1",  # bump when a change makes this asset write something else for the same input
    deps=[raw_text],
    group_name="ingest",
    kinds={"s3", "python", "postgres"},
    retry_policy=NETWORK_RETRY,
    automation_condition=dg.AutomationCondition.eager(),
    description="Encoding repair, language ID, quality filters, PII masking, exact + MinHash dedup across "
    "batches (index in PostgreSQL, first writer wins). Streams the batch in chunks into zstd JSONL shards + "
    "manifest; every dropped document goes to the exclusion sink with its reason.",
)
def cleaned_shards(
    context: dg.AssetExecutionContext,
    s3: S3Resource,
    layout: PipelineLayout,
    cleaning: CleaningResource,
    kafka: KafkaResource,
    dedup: DedupIndexResource,
    pushgateway: PushgatewayResource,
    locks: BatchLocks,
) -> dg.MaterializeResult:
    from pipeline_project.cleaning.attempt import clean_attempt
    from pipeline_project.cleaning.output import publish
    from pipeline_project.provenance.publications import delete_superseded_unless_archived

    batch_id = context.partition_key
    client = s3.get_client()
    config = cleaning.config()
    manifest = read_manifest(client, layout.bucket, batch_id)
    index = _open_index(dedup, config, client, layout)
    records = publish.exclusion_recorder(config)
    run = _attempt(context, client, layout, cleaning, config, manifest, dedup.blocklist())
    with locks.hold(batch_id):  # no retune, retire or produce of this batch meanwhile
        previous = publish.read_shard_manifest_or_none(client, layout.bucket, layout.shard_dir(batch_id))
        outcome = clean_attempt(
            run,
            index,
            iter_batch_items(client, manifest, config),
            records,
            lambda m: refuse_other_content(
                kafka.ledger_records(layout.topic.name, batch_id), m.content_hash(), batch_id, layout.topic.name
            ),
            previous,
        )
        # a produced (archived) publication keeps its objects: its blocks in the topic still name it
        delete_superseded_unless_archived(client, layout.bucket, layout.shard_dir(batch_id), previous, outcome.manifest)
    out = outcome.out
    context.log.info(f"batch {batch_id}: {dict(out.counts)} in {out.chunks} chunks, {run.workers} filter workers")
    pushgateway.push_batch(
        "pipeline_cleaning", "cleaned_shards", batch_id, lambda m: m.record_cleaning(out.counts, out.dropped_by_reason)
    )
    return dg.MaterializeResult(metadata=_metadata(layout.bucket, outcome, run.workers))


def _open_index(dedup: DedupIndexResource, config, client, layout: PipelineLayout):
    from pipeline_project.cleaning.output import publish

    mh = config.dedup.minhash
    is_published = publish.manifest_names_attempt(client, layout.bucket, layout.shard_dir)
    return dedup.open(
        num_perm=mh.num_buckets * mh.hashes_per_bucket, num_bands=mh.num_buckets, is_published=is_published
    )


def _attempt(
    context: dg.AssetExecutionContext,
    client,
    layout: PipelineLayout,
    cleaning: CleaningResource,
    config,
    manifest,
    blocklist=None,
):
    """This run and try's attempt: it writes under prefixes of its own (see `cleaning.batch_attempt`)."""
    from pipeline_project.cleaning.attempt import BatchAttempt

    batch_id = context.partition_key
    return BatchAttempt(
        client=client,
        bucket=layout.bucket,
        batch_id=batch_id,
        config=config,
        manifest=manifest,
        shard_dir=layout.shard_dir(batch_id),
        exclusions_dir=layout.exclusions_dir(batch_id),
        attempt=f"{context.run.run_id[:8]}-{context.retry_number}",
        max_shard_bytes=cleaning.max_shard_mb << 20,
        workers=cleaning.worker_count(manifest.total_bytes),
        chunk_docs=cleaning.chunk_docs,
        chunk_bytes=cleaning.chunk_mb << 20,
        blocklist=blocklist,  # takedowns (`ops.takedown`): a re-upload is dropped as blocked:<request>
    )


def _metadata(bucket: str, outcome, workers: int) -> dict:
    out, shard_manifest, traffic = outcome.out, outcome.manifest, outcome.traffic
    return {
        "documents_in": out.counts["in"],
        "kept": out.counts["kept"],
        "dropped": out.counts["dropped"],
        "quarantined": out.counts["quarantined"],
        "dropped_by_reason": dict(out.dropped_by_reason),
        "removal_table": dg.MetadataValue.md(out.removal_table_markdown()),
        "bytes_out": shard_manifest.bytes_out,
        "raw_bytes_kept": shard_manifest.raw_bytes_kept,
        "shard_keys": [sh.key for sh in shard_manifest.shards],
        "exclusions": dg.MetadataValue.path(f"s3://{bucket}/{shard_manifest.exclusions}"),
        "config_hash": shard_manifest.config_hash,
        "content_hash": shard_manifest.content_hash(),
        "manifest_sha256": outcome.published.manifest_sha256,
        "chunks": out.chunks,
        "filter_workers": workers,
        **({"dedup_index": traffic.as_dict()} if traffic is not None else {}),
    }


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
