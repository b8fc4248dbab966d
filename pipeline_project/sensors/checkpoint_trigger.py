"""Train when enough tokens in the topic are still untrained, one training run at a time.

What counts is the data's truth, not the order of events: the tokens of every materialized `token_blocks`
batch (its newest materialization, whether it produced or reused its ledger entry) that lie past the data
position of the newest checkpoint (`end_position`: per Kafka partition, the next offset to read). So a batch
whose first attempt committed to Kafka and then failed (its retry reports `reused_existing`) still counts,
and so does the backlog a `max_steps` cap left behind: no new data is ever left untrained.

The approximation: a batch's tokens are taken as spread evenly over the offsets of its per-partition ranges
(`offset_ranges`, first and last offset). The untrained share of a batch is the share of those offsets at or
past the checkpoint's offset in each partition. It is exact when a range holds only that batch's messages
and they carry equal blocks. Interleaved batches, transaction markers and a partly read message (its
`block` cursor) only move the estimate by a few messages. A partly read message counts as untrained.

A tick costs the batches materialized since the last tick plus the backlog, not every batch ever: the sensor's
cursor (`BacklogState`) holds the newest materialization taken and the batches not yet wholly trained.
"""

from __future__ import annotations

import dagster as dg

from pipeline_project.assets.backlog import BacklogState, untrained_backlog
from pipeline_project.assets.checkpoint import IN_FLIGHT, deepseek_checkpoint, training_runs
from pipeline_project.assets.partitions import TRAINING_RUN_TAGS
from pipeline_project.settings import Settings


@dg.sensor(
    name="checkpoint_trigger_sensor",
    minimum_interval_seconds=30,
    default_status=dg.DefaultSensorStatus.RUNNING,
    asset_selection=[deepseek_checkpoint],
    description="Requests deepseek_checkpoint once $PIPELINE_MIN_NEW_TOKENS tokens in the topic are untrained "
    "(past the newest checkpoint's position), and never while a training run is queued or running. "
    "Materialize it from the UI to train on demand.",
)
def checkpoint_trigger_sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult:
    busy = training_runs(context.instance, IN_FLIGHT)
    if busy:
        run = busy[0].dagster_run
        return dg.SensorResult(skip_reason=f"training run {run.run_id} is {run.status.value}: one at a time")
    threshold = Settings().min_new_tokens
    state = BacklogState.from_cursor(context.cursor)
    backlog = untrained_backlog(context.instance, state)
    if backlog.tokens < threshold:
        return dg.SensorResult(skip_reason=f"{backlog.tokens} untrained tokens < {threshold}", cursor=state.to_cursor())
    context.log.info(f"{backlog.tokens} untrained tokens in {backlog.batches} batches: requesting training")
    return dg.SensorResult(
        run_requests=[dg.RunRequest(run_key=backlog.run_key, tags=dict(TRAINING_RUN_TAGS))], cursor=state.to_cursor()
    )
