"""Train when enough new tokens have reached the topic since the last checkpoint."""

import os

import dagster as dg

MIN_NEW_TOKENS_ENV = "PIPELINE_MIN_NEW_TOKENS"
DEFAULT_MIN_NEW_TOKENS = 200_000


def new_tokens_since_last_checkpoint(instance: dg.DagsterInstance) -> tuple[int, int]:
    """(tokens produced by kafka_topic materializations after the newest checkpoint, newest event id)."""
    last_ckpt = instance.fetch_materializations(dg.AssetKey("deepseek_checkpoint"), limit=1).records
    after_id = last_ckpt[0].storage_id if last_ckpt else 0
    tokens, newest, cursor = 0, after_id, None
    while True:
        page = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=dg.AssetKey("kafka_topic"), after_storage_id=after_id),
            limit=500,
            cursor=cursor,
            ascending=True,
        )
        for rec in page.records:
            meta = rec.asset_materialization.metadata or {}
            if not getattr(meta.get("reused_existing"), "value", False):
                tokens += int(getattr(meta.get("tokens"), "value", 0) or 0)
            newest = max(newest, rec.storage_id)
        if not page.has_more:
            return tokens, newest
        cursor = page.cursor


@dg.sensor(
    name="checkpoint_trigger_sensor",
    minimum_interval_seconds=30,
    default_status=dg.DefaultSensorStatus.RUNNING,
    asset_selection=["deepseek_checkpoint"],
    description=f"Requests deepseek_checkpoint once ${MIN_NEW_TOKENS_ENV} (default {DEFAULT_MIN_NEW_TOKENS}) "
    "new tokens are in the topic. Materialize it from the UI to train on demand.",
)
def checkpoint_trigger_sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult:
    threshold = int(os.environ.get(MIN_NEW_TOKENS_ENV, DEFAULT_MIN_NEW_TOKENS))
    tokens, newest = new_tokens_since_last_checkpoint(context.instance)
    if tokens < threshold:
        return dg.SensorResult(skip_reason=f"{tokens} new tokens < {threshold}")
    return dg.SensorResult(run_requests=[dg.RunRequest(run_key=f"tokens-upto-{newest}")])
