"""`raw_text`: one batch of S3 objects, named by an immutable manifest the sensor wrote."""

from collections import Counter

import dagster as dg
from dagster_aws.s3 import S3Resource

from pipeline_project.defs.partitions import NETWORK_RETRY, batches
from pipeline_project.defs.resources.layout import PipelineLayout
from pipeline_project.ingest.manifest import manifest_key, read_manifest


@dg.asset(
    partitions_def=batches,
    code_version="1",  # bump when a change makes this asset write something else for the same input
    group_name="ingest",
    kinds={"s3"},
    retry_policy=NETWORK_RETRY,
    description="A batch of raw text objects in S3 (.txt, .jsonl, .json, .html/.htm, each plain, .gz or .zst: "
    "`cleaning.readers.SUPPORTED_SUFFIXES`), listed with keys, etags and sizes in an immutable manifest. "
    "Every object is accounted for: its documents, or quarantine records with a reason.",
)
def raw_text(context: dg.AssetExecutionContext, s3: S3Resource, layout: PipelineLayout) -> dg.MaterializeResult:
    """The manifest, checked against S3 (HEAD per object), without reading the objects: cleaned_shards streams
    them once and accounts for every document; an object missing or changed here is quarantined there."""
    from pipeline_project.cleaning.read.readers import format_of

    client = s3.get_client()
    manifest = read_manifest(client, layout.bucket, context.partition_key)
    problems = _changed_objects(client, layout.bucket, manifest)
    context.log.info(
        f"batch {manifest.batch_id}: {len(manifest.objects)} objects, {manifest.total_bytes} bytes, "
        f"{len(problems)} missing or changed"
    )
    return dg.MaterializeResult(
        metadata={
            "objects": len(manifest.objects),
            "bytes": manifest.total_bytes,
            "formats": dict(Counter(format_of(o.key) for o in manifest.objects)),
            "missing_or_changed": len(problems),
            "manifest": dg.MetadataValue.path(f"s3://{layout.bucket}/{manifest_key(manifest.batch_id)}"),
            "object_table": dg.MetadataValue.md(objects_table(manifest, problems)),
        }
    )


def objects_table(manifest, problems: list[str], limit: int = 200) -> str:
    """The batch's objects as a markdown table (the first `limit`), each with what the HEAD found."""
    found = dict(p.split(": ", 1) for p in problems)
    rows = [f"| {o.key} | {o.size} | {o.etag} | {found.get(o.key, 'ok')} |" for o in manifest.objects[:limit]]
    more = len(manifest.objects) - limit
    tail = [f"\n{more} more in the manifest"] if more > 0 else []
    return "\n".join(["| key | bytes | etag | S3 now |", "|---|---:|---|---|", *rows, *tail])


def _changed_objects(client, bucket: str, manifest) -> list[str]:
    changed = []
    for obj in manifest.objects:
        try:
            head = client.head_object(Bucket=bucket, Key=obj.key)
        except client.exceptions.ClientError as exc:
            changed.append(f"{obj.key}: {exc.response.get('Error', {}).get('Code') or 'unreadable'}")
            continue
        if str(head.get("ETag", "")).strip('"') != obj.etag or int(head["ContentLength"]) != obj.size:
            changed.append(f"{obj.key}: etag/size differ")
    return changed


@dg.asset_check(
    asset=raw_text, partitions_def=batches, description="Every object of the manifest is still in S3, unchanged."
)
def raw_objects_unchanged(
    context: dg.AssetCheckExecutionContext, s3: S3Resource, layout: PipelineLayout
) -> dg.AssetCheckResult:
    client = s3.get_client()
    manifest = read_manifest(client, layout.bucket, context.partition_key)
    changed = _changed_objects(client, layout.bucket, manifest)
    return dg.AssetCheckResult(passed=not changed, metadata={"objects": len(manifest.objects), "changed": changed[:20]})
