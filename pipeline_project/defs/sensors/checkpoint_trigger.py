"""Train when enough tokens in the topic are still untrained, one bounded training run at a time.

What counts is the data's truth, not the order of events: the tokens of every materialized `token_blocks`
batch (its newest materialization, whether it produced or reused its ledger entry) that lie past the data
position of the newest checkpoint (`end_position`: per Kafka partition, the next offset to read), or of the one
the trained lineage's latest.json names when that is another (a rewind: `assets.backlog.lineage`). So a batch
whose first attempt committed to Kafka and then failed (its retry reports `reused_existing`) still counts,
and so does the backlog a `max_steps` bound left behind: no new data is ever left untrained.

The approximation: a batch's tokens are taken as spread evenly over the offsets of its per-partition ranges
(`offset_ranges`, first and last offset). The untrained share of a batch is the share of those offsets at or
past the checkpoint's offset in each partition. It is exact when a range holds only that batch's messages
and they carry equal blocks. Interleaved batches, transaction markers and a partly read message (its
`block` cursor) only move the estimate by a few messages. A partly read message counts as untrained.

Neither spin nor stall (`trigger_policy`):
- a triggered run trains at most $PIPELINE_TRIGGER_MAX_STEPS steps (its run config); when the newest checkpoint
  stopped at such a bound, any untrained token is requested next, not $PIPELINE_MIN_NEW_TOKENS;
- a run that trained 0 steps (a dry domain under `wait`, data the estimate took for untrained) is not requested
  again until $PIPELINE_MIN_NEW_TOKENS tokens arrived after what it saw;
- a failed or canceled training run is requested again (with a new run key) after a backoff that doubles with
  each failure in a row, from $PIPELINE_TRIGGER_RETRY_BASE_S up to $PIPELINE_TRIGGER_RETRY_MAX_S; the streak
  lives in the cursor and the skip reason says when the next try is;
- nothing is requested while a training run is in flight, or while someone (the demo) holds the trigger.

What the run trains is the Definitions' `trainer` resource, built from the deployment's settings (the model, the
lineage, the hyper-parameters: `resources.trainer.trainer_from_settings`); the request's tags name its lineage and
model, so the runs list shows what each triggered run trains.

A tick costs the batches materialized since the last tick, not every batch ever, and carries a few numbers: the
batches not yet wholly trained are rows in the deployment's PostgreSQL (`TrainingTrigger.backlog_url`,
`assets.backlog.store`), judged again only where the checkpoint moved past them and summed there; the sensor's
cursor (`TriggerCursor`) names their scope. A tick that has every batch to read (the first one, a new lineage, a
reset) reads for `TICK_BUDGET_S` and goes on at the next tick; it requests a run early only when what it has
counted already passes the threshold.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone

import dagster as dg

from pipeline_project.defs.assets.backlog import Backlog, HeadSource, open_store, untrained_backlog
from pipeline_project.defs.assets.backlog.lineage import lineage_head
from pipeline_project.defs.assets.checkpoint import IN_FLIGHT, deepseek_checkpoint, training_runs
from pipeline_project.defs.partitions import TRAINING_RUN_TAGS, with_max_runtime
from pipeline_project.defs.resources.trainer import TrainerResource
from pipeline_project.defs.resources.trigger import TrainingTrigger
from pipeline_project.defs.sensors.trigger_policy import TriggerCursor, active_hold, last_training

TICK_BUDGET_S = 20.0  # reading materializations per tick, well under Dagster's 60 s limit


@dg.sensor(
    name="checkpoint_trigger_sensor",
    minimum_interval_seconds=30,
    default_status=dg.DefaultSensorStatus.RUNNING,
    asset_selection=[deepseek_checkpoint],
    description="Requests deepseek_checkpoint, bounded to $PIPELINE_TRIGGER_MAX_STEPS steps, once "
    "$PIPELINE_MIN_NEW_TOKENS tokens in the topic are untrained (past the newest checkpoint's position); never "
    "while a training run is queued or running, again after a failure only after a growing backoff, and not again "
    "after a run that trained nothing until new data arrives. Materialize it from the UI to train on demand.",
)
def checkpoint_trigger_sensor(
    context: dg.SensorEvaluationContext, trigger: TrainingTrigger, trainer: TrainerResource
) -> dg.SensorResult:
    now = time.time()
    state = TriggerCursor.from_cursor(context.cursor)
    hold = active_hold(context.instance, now)
    if hold:
        return dg.SensorResult(skip_reason=f"held by {hold.get('owner')} until {_iso(hold['until'])}")
    busy = training_runs(context.instance, IN_FLIGHT)
    if busy:
        run = busy[0].dagster_run
        return dg.SensorResult(skip_reason=f"training run {run.run_id} is {run.status.value}: one at a time")
    state.note_outcome(context.instance, base_s=trigger.retry_base_s, max_s=trigger.retry_max_s, now=now)
    if now < state.retry_at:
        reason = (
            f"training run {state.failed_run} failed ({state.failures} in a row): retrying in "
            f"{state.retry_at - now:.0f}s, at {_iso(state.retry_at)}"
        )
        return dg.SensorResult(skip_reason=reason, cursor=state.to_cursor())
    store = open_store(trigger.backlog_url, getattr(context.instance, "root_directory", None))
    try:
        backlog = untrained_backlog(
            context.instance,
            state.backlog,
            budget_s=TICK_BUDGET_S,
            store=store,
            lineage=trigger_lineage(trigger, trainer.run_name),
        )
        reason = _why_not(context.instance, backlog, trigger.min_new_tokens)
    finally:
        store.close()
    if reason and not backlog.caught_up:
        reason = (
            f"counting the untrained backlog: {backlog.batches} batches ({backlog.tokens} tokens) so far, up to "
            f"storage id {backlog.newest_id}; the next tick goes on"
        )
    if reason:
        return dg.SensorResult(skip_reason=reason, cursor=state.to_cursor())
    run_key = backlog.run_key + (f"-after-failed-{state.failed_run[:8]}" if state.failed_run else "")
    context.log.info(f"{backlog.tokens} untrained tokens in {backlog.batches} batches: requesting training")
    return dg.SensorResult(
        run_requests=[
            dg.RunRequest(
                run_key=run_key,
                run_config=_bound(trigger.max_steps),
                tags={**with_max_runtime(TRAINING_RUN_TAGS, trigger.max_runtime_s), **trainer.run_tags()},
            )
        ],
        cursor=state.to_cursor(),
    )


def _why_not(instance: dg.DagsterInstance, backlog: Backlog, threshold: int) -> str | None:
    """Why this backlog is not worth a run (None: it is)."""
    last = last_training(instance)
    if last is not None and last.trained_nothing:
        fresh = backlog.tokens_after(last.saw_upto)
        if fresh < threshold:
            return (
                f"the last training run ({last.run_id or 'runless'}) trained 0 steps "
                f"({last.stop_reason or 'no reason given'}): waiting for {threshold} tokens newer than what it saw "
                f"({fresh} so far; {backlog.tokens} untrained in all)"
            )
        return None
    if last is not None and last.stopped_at_bound and backlog.tokens > 0:
        return None  # the rest of a bounded run's backlog
    if backlog.tokens < threshold:
        return f"{backlog.tokens} untrained tokens < {threshold}"
    return None


def trigger_lineage(trigger: TrainingTrigger, run_name: str) -> HeadSource | None:
    """The `HeadSource` of lineage `run_name` in the trigger's S3 (`assets.backlog.lineage`); None without S3."""
    if trigger.s3 is None or trigger.layout is None:
        return None
    prefix = f"{trigger.layout.checkpoints_prefix}{run_name}"
    return lineage_head(trigger.s3.get_client(), trigger.layout.bucket, prefix)


def _bound(max_steps: int) -> dict:
    """The run config that bounds a triggered run to $PIPELINE_TRIGGER_MAX_STEPS steps (none when 0)."""
    if max_steps <= 0:
        return {}
    return {"ops": {deepseek_checkpoint.op.name: {"config": {"max_steps": max_steps}}}}


def _iso(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, timezone.utc).strftime("%H:%M:%S UTC")
