import dagster as dg

batches = dg.DynamicPartitionsDefinition(name="batches")

# S3 and Kafka calls fail transiently; these steps are safe to retry (manifests are immutable,
# shards are overwritten whole, Kafka produce is transactional with a ledger).
#
# The budget covers an outage of at least 2 minutes, whatever the jitter draws. Dagster 1.13
# (`dagster/_core/definitions/policy.py`, `calculate_delay`) waits, before retry n = 1, 2, ...:
#   EXPONENTIAL:  d_n = (2**n - 1) * delay
#   PLUS_MINUS:   d_n + uniform(-delay, +delay)
# With delay=4 s: d_n = 4, 12, 28, 60, 124 s, so retry n starts between sum(d_k - 4) and sum(d_k + 4):
#   retry 4 between  88 s and 136 s after the first failure,
#   retry 5 between 208 s and 248 s  -> 5 retries always reach past 120 s (and give up within ~4 min).
# PLUS_MINUS, not FULL: FULL jitter draws from [0, d_n], so its total can be arbitrarily close to 0 s
# (three FULL retries at delay=2 covered ~14 s of an outage). Run retries (`run_retries` in the instance
# config) re-launch a run whose steps still fail after that.
NETWORK_RETRY_DELAY_S = 4
NETWORK_RETRY = dg.RetryPolicy(
    max_retries=5, delay=NETWORK_RETRY_DELAY_S, backoff=dg.Backoff.EXPONENTIAL, jitter=dg.Jitter.PLUS_MINUS
)
MIN_OUTAGE_COVERED_S = 120

# Run tags that the instance's `concurrency.runs.tag_concurrency_limits` count: at most one training run, and
# ingest runs have a limit of their own, so ingest never waits behind training (deploy/dagster/dagster.yaml).
RUN_KIND_TAG = "pipeline/kind"
TRAINING_RUN_TAGS = {RUN_KIND_TAG: "training"}
INGEST_RUN_TAGS = {RUN_KIND_TAG: "ingest"}
# Run monitoring (the daemon) fails a run still going after the seconds of this tag, so a hung run frees its slot
# and run retries launch it again; the jobs and the automation sensor set it per kind from Settings.
MAX_RUNTIME_TAG = "dagster/max_runtime"


def with_max_runtime(kind_tags: dict[str, str], max_runtime_s: int) -> dict[str, str]:
    """A kind's run tags with its runtime bound (none for 0: the instance's max_runtime_seconds applies)."""
    return {**kind_tags, **({MAX_RUNTIME_TAG: str(int(max_runtime_s))} if max_runtime_s > 0 else {})}


# The Dagster pool of deepseek_checkpoint: limit 1 (`concurrency.pools.default_limit`, or
# `dagster instance concurrency set training 1`), so even an untagged run waits for the one training step.
TRAINING_POOL = "training"


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
    return plain_metadata(records[0].asset_materialization)


def plain_metadata(materialization: dg.AssetMaterialization | None) -> dict:
    """A materialization's metadata as plain values (MetadataValue -> its .value)."""
    if materialization is None:
        return {}
    return {k: getattr(v, "value", v) for k, v in (materialization.metadata or {}).items()}


def untrained_share(offset_ranges: dict, position: dict) -> float:
    """The share of a batch's offsets ({partition: [first, last]}) at or past `position` ({partition:
    {"offset": next to read, ...}}); a partition the position does not name is untrained from its start."""
    total = untrained = 0
    for partition, (first, last) in offset_ranges.items():
        first, last = int(first), int(last)
        if last < first:
            continue
        next_offset = int((position.get(str(partition)) or {}).get("offset", 0))
        total += last - first + 1
        untrained += max(0, last - max(first, next_offset) + 1)
    return untrained / total if total else 0.0
