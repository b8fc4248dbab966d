import dagster as dg

batches = dg.DynamicPartitionsDefinition(name="batches")

# S3 and Kafka calls fail transiently; these steps are safe to retry (manifests are immutable,
# shards are overwritten whole, Kafka produce is transactional with a ledger).
NETWORK_RETRY = dg.RetryPolicy(max_retries=3, delay=2, backoff=dg.Backoff.EXPONENTIAL, jitter=dg.Jitter.FULL)


def latest_materialization_metadata(
    instance: dg.DagsterInstance, asset_key: dg.AssetKey, partition: str | None = None
) -> dict:
    """Metadata of the newest materialization of an asset (partition), as plain values."""
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=asset_key, asset_partitions=[partition] if partition else None),
        limit=1,
    ).records
    if not records:
        return {}
    mat = records[0].asset_materialization
    return {k: getattr(v, "value", v) for k, v in (mat.metadata or {}).items()}
