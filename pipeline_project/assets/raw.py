"""`raw_text`: one batch of S3 objects, named by an immutable manifest the sensor wrote."""

from collections import Counter

import dagster as dg
from dagster_aws.s3 import S3Resource

from pipeline_project.assets.partitions import NETWORK_RETRY, batches
from pipeline_project.ingest import iter_batch_items, manifest_key, read_manifest
from pipeline_project.resources.cleaning import CleaningResource
from pipeline_project.resources.layout import PipelineLayout


@dg.asset(
    partitions_def=batches,
    group_name="ingest",
    kinds={"s3"},
    retry_policy=NETWORK_RETRY,
    description="A batch of raw text objects in S3 (.txt, .jsonl, .json.gz, .jsonl.zst, .txt.gz), "
    "listed with keys, etags and sizes in an immutable manifest.",
)
def raw_text(
    context: dg.AssetExecutionContext, s3: S3Resource, layout: PipelineLayout, cleaning: CleaningResource
) -> dg.MaterializeResult:
    from pipeline_project.cleaning import Quarantined

    client = s3.get_client()
    manifest = read_manifest(client, layout.bucket, context.partition_key)
    config = cleaning.config()
    documents, reasons = 0, Counter()
    for item in iter_batch_items(client, manifest, config):
        if isinstance(item, Quarantined):
            reasons[item.reason] += 1
        else:
            documents += 1
    context.log.info(
        f"batch {manifest.batch_id}: {len(manifest.objects)} objects, {documents} documents, "
        f"{sum(reasons.values())} quarantined"
    )
    suffixes = Counter(o.key.rsplit("/", 1)[-1].split(".", 1)[-1] for o in manifest.objects)
    return dg.MaterializeResult(
        metadata={
            "objects": len(manifest.objects),
            "bytes": manifest.total_bytes,
            "documents": documents,
            "quarantined": sum(reasons.values()),
            "quarantine_reasons": dict(reasons),
            "formats": dict(suffixes),
            "manifest": dg.MetadataValue.path(f"s3://{layout.bucket}/{manifest_key(manifest.batch_id)}"),
        }
    )


@dg.asset_check(
    asset=raw_text, partitions_def=batches, description="Every object of the manifest is still in S3, unchanged."
)
def raw_objects_unchanged(
    context: dg.AssetCheckExecutionContext, s3: S3Resource, layout: PipelineLayout
) -> dg.AssetCheckResult:
    client = s3.get_client()
    manifest = read_manifest(client, layout.bucket, context.partition_key)
    changed = []
    for obj in manifest.objects:
        try:
            head = client.head_object(Bucket=layout.bucket, Key=obj.key)
        except client.exceptions.ClientError:
            changed.append(f"{obj.key}: missing")
            continue
        if str(head.get("ETag", "")).strip('"') != obj.etag or int(head["ContentLength"]) != obj.size:
            changed.append(f"{obj.key}: etag/size differ")
    return dg.AssetCheckResult(passed=not changed, metadata={"objects": len(manifest.objects), "changed": changed[:20]})
