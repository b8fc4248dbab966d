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
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import dagster as dg

from pipeline_project.assets.checkpoint import IN_FLIGHT, deepseek_checkpoint, training_runs
from pipeline_project.assets.partitions import TRAINING_RUN_TAGS, plain_metadata
from pipeline_project.assets.token_blocks import token_blocks
from pipeline_project.settings import Settings


@dataclass(frozen=True)
class Backlog:
    tokens: int  # untrained tokens, estimated as the module docstring says
    batches: int  # batches with untrained tokens
    checkpoint_id: int  # storage id of the newest checkpoint materialization (0: none)
    newest_id: int  # storage id of the newest token_blocks materialization (0: none)

    @property
    def run_key(self) -> str:
        """The same data and checkpoint give the same key, so the same backlog is requested once."""
        return f"ckpt-{self.checkpoint_id}-tokens-upto-{self.newest_id}"


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


def _latest_per_partition(instance: dg.DagsterInstance) -> Iterator[tuple[int, dict]]:
    """(storage id, metadata) of the newest token_blocks materialization of each batch."""
    latest: dict[str | None, tuple[int, dict]] = {}
    cursor = None
    while True:
        page = instance.fetch_materializations(token_blocks.key, limit=500, cursor=cursor, ascending=True)
        for rec in page.records:
            latest[rec.asset_materialization.partition] = (rec.storage_id, plain_metadata(rec.asset_materialization))
        if not page.has_more:
            yield from latest.values()
            return
        cursor = page.cursor


def untrained_backlog(instance: dg.DagsterInstance) -> Backlog:
    """What of the topic the newest checkpoint has not trained on."""
    last_ckpt = instance.fetch_materializations(deepseek_checkpoint.key, limit=1).records
    checkpoint_id = last_ckpt[0].storage_id if last_ckpt else 0
    position = plain_metadata(last_ckpt[0].asset_materialization).get("end_position") if last_ckpt else None
    tokens, batches, newest = 0.0, 0, 0
    for storage_id, meta in _latest_per_partition(instance):
        newest = max(newest, storage_id)
        ranges = meta.get("offset_ranges")
        if isinstance(ranges, dict) and isinstance(position, dict):
            share = untrained_share(ranges, position)
        else:  # no position (no checkpoint yet) or no ranges to compare: untrained if newer than the checkpoint
            share = 1.0 if storage_id > checkpoint_id else 0.0
        batch_tokens = share * int(meta.get("tokens") or 0)
        if batch_tokens > 0:
            tokens += batch_tokens
            batches += 1
    return Backlog(tokens=round(tokens), batches=batches, checkpoint_id=checkpoint_id, newest_id=newest)


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
    backlog = untrained_backlog(context.instance)
    if backlog.tokens < threshold:
        return dg.SensorResult(skip_reason=f"{backlog.tokens} untrained tokens < {threshold}")
    context.log.info(f"{backlog.tokens} untrained tokens in {backlog.batches} batches: requesting training")
    return dg.SensorResult(run_requests=[dg.RunRequest(run_key=backlog.run_key, tags=dict(TRAINING_RUN_TAGS))])
