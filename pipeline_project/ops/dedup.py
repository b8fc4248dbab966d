"""Migrate the S3 dedup index file of earlier versions (`dedup/index.bin`) into the PostgreSQL index (its one
database, or its shards when `PIPELINE_DEDUP_SHARD_URLS` names them)."""

from __future__ import annotations

from pipeline_project.settings import Settings


def import_s3_index(settings: Settings, key: str, schema: str) -> tuple[int, int]:
    """(documents imported, batches they came from)."""
    from pipeline_project.cleaning.dedup.local import LocalIndex
    from pipeline_project.cleaning.dedup.migrate import import_local_index
    from pipeline_project.cleaning.dedup.opening import open_index
    from pipeline_project.common.batch_lock import batch_lock

    data = settings.s3_client().get_object(Bucket=settings.bucket, Key=key)["Body"].read()
    old = LocalIndex.from_bytes(data)
    index = open_index(
        settings.postgres_url, settings.dedup_shard_urls, num_perm=old.num_perm, num_bands=old.num_bands, schema=schema
    )
    try:
        hold = lambda batch: batch_lock(settings.postgres_url, batch)  # noqa: E731
        return import_local_index(index, old, hold=hold), len(old.batches)
    finally:
        index.close()
