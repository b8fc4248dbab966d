"""Train when enough new tokens have reached the topic since the last checkpoint."""

import dagster as dg

from pipeline_project.assets.checkpoint import deepseek_checkpoint
from pipeline_project.assets.token_blocks import token_blocks
from pipeline_project.settings import Settings


def new_tokens_since_last_checkpoint(instance: dg.DagsterInstance) -> tuple[int, int]:
    """(tokens produced by token_blocks materializations after the newest checkpoint, newest event id)."""
    last_ckpt = instance.fetch_materializations(deepseek_checkpoint.key, limit=1).records
    after_id = last_ckpt[0].storage_id if last_ckpt else 0
    tokens, newest, cursor = 0, after_id, None
    while True:
        page = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=token_blocks.key, after_storage_id=after_id),
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
    asset_selection=[deepseek_checkpoint],
    description="Requests deepseek_checkpoint once $PIPELINE_MIN_NEW_TOKENS new tokens are in the topic. "
    "Materialize it from the UI to train on demand.",
)
def checkpoint_trigger_sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult:
    threshold = Settings().min_new_tokens
    tokens, newest = new_tokens_since_last_checkpoint(context.instance)
    if tokens < threshold:
        return dg.SensorResult(skip_reason=f"{tokens} new tokens < {threshold}")
    return dg.SensorResult(run_requests=[dg.RunRequest(run_key=f"tokens-upto-{newest}")])
