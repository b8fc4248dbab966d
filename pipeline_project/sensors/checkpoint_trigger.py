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

import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field

import dagster as dg

from pipeline_project.assets.checkpoint import IN_FLIGHT, deepseek_checkpoint, training_runs
from pipeline_project.assets.partitions import TRAINING_RUN_TAGS, plain_metadata, untrained_share
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


@dataclass
class BacklogState:
    """What the trigger keeps between ticks (its cursor), so a tick reads the materializations since the last one,
    not every batch ever: the newest token_blocks materialization taken (`after`, a storage id), the checkpoint
    it pruned with, and the batches not wholly trained at that checkpoint (batch -> [storage id, tokens, offset
    ranges or None]). A batch wholly behind a checkpoint's position stays trained while positions only move
    forward; when the newest checkpoint's position is behind the one pruned with (another lineage, a reset), the
    state is rebuilt from every materialization."""

    after: int = 0
    checkpoint_id: int = 0
    position: dict | None = None
    pending: dict[str, list] = field(default_factory=dict)

    def to_cursor(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_cursor(cls, cursor: str | None) -> BacklogState:
        try:
            return cls(**json.loads(cursor)) if cursor else cls()
        except (TypeError, ValueError):  # a cursor of an earlier version: rebuild
            return cls()

    def follows(self, checkpoint_id: int, position: dict | None) -> bool:
        """May this state's pruning stand under the newest checkpoint (`checkpoint_id`, `position`)?"""
        if checkpoint_id < self.checkpoint_id:
            return False
        if self.position is None:
            return True
        if position is None:
            return False
        return all(_offset(position, p) >= _offset(self.position, p) for p in self.position)


def _offset(position: dict, partition: str) -> int:
    return int((position.get(str(partition)) or {}).get("offset", 0))


def untrained_backlog(instance: dg.DagsterInstance, state: BacklogState | None = None) -> Backlog:
    """What of the topic the newest checkpoint has not trained on; `state` (updated in place) carries it over."""
    state = state if state is not None else BacklogState()
    last_ckpt = instance.fetch_materializations(deepseek_checkpoint.key, limit=1).records
    checkpoint_id = last_ckpt[0].storage_id if last_ckpt else 0
    position = plain_metadata(last_ckpt[0].asset_materialization).get("end_position") if last_ckpt else None
    position = position if isinstance(position, dict) else None
    if not state.follows(checkpoint_id, position):
        state.after, state.pending = 0, {}
    for storage_id, batch, meta in _materializations_after(instance, state.after):
        ranges = meta.get("offset_ranges")
        state.pending[batch] = [storage_id, int(meta.get("tokens") or 0), ranges if isinstance(ranges, dict) else None]
        state.after = storage_id
    state.checkpoint_id, state.position = checkpoint_id, position
    tokens, batches = 0.0, 0
    for batch, (storage_id, batch_tokens, ranges) in list(state.pending.items()):
        if ranges is not None and position is not None:
            share = untrained_share(ranges, position)
        else:  # no position (no checkpoint yet) or no ranges to compare: untrained if newer than the checkpoint
            share = 1.0 if storage_id > checkpoint_id else 0.0
        if share == 0.0:
            del state.pending[batch]  # trained, and stays so while positions move forward
        elif batch_tokens > 0:
            tokens += share * batch_tokens
            batches += 1
    return Backlog(tokens=round(tokens), batches=batches, checkpoint_id=checkpoint_id, newest_id=state.after)


def _materializations_after(instance: dg.DagsterInstance, after: int) -> Iterator[tuple[int, str, dict]]:
    """(storage id, batch, metadata) of the token_blocks materializations after storage id `after`, oldest first."""
    records_filter = dg.AssetRecordsFilter(asset_key=token_blocks.key, after_storage_id=after or None)
    cursor = None
    while True:
        page = instance.fetch_materializations(records_filter, limit=500, cursor=cursor, ascending=True)
        for rec in page.records:
            if rec.asset_materialization.partition:
                yield rec.storage_id, rec.asset_materialization.partition, plain_metadata(rec.asset_materialization)
        if not page.has_more:
            return
        cursor = page.cursor


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
