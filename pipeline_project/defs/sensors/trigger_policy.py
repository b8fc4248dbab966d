"""What the checkpoint trigger remembers and judges between ticks, so that it neither spins nor stalls.

- `TriggerCursor`: the sensor's cursor. It names the untrained backlog's scope (`assets.backlog.BacklogState`:
  the batches themselves are rows in the backlog store) and carries the failure streak: how many training runs failed in a row, the newest one, and when the next try may start.
  The cursor is stored by the instance, so a daemon restart keeps the backoff.
- `retry_delay`: exponential backoff, capped.
- `last_training`: what the newest checkpoint materialization did (steps, stop reason) and the newest token_blocks
  materialization its run surely saw (one from before the run started), so a run that trained nothing is not
  requested again until enough data arrived after it.
- A hold: a lease in the instance's key-value store that makes the trigger request nothing until it expires or
  its owner releases it. The demo holds it while it trains, so its own run never queues behind a triggered one;
  a demo that dies leaves a hold that expires by itself (a stopped sensor would stay stopped).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

import dagster as dg

from pipeline_project.defs.assets.backlog import CHECKPOINT_KEY, TOKEN_BLOCKS_KEY, BacklogState
from pipeline_project.defs.partitions import TRAINING_RUN_TAGS, plain_metadata

HOLD_KEY = "pipeline_project/checkpoint_trigger_hold"
FAILED = (dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED)
FINISHED = [dg.DagsterRunStatus.SUCCESS, *FAILED]


def retry_delay(failures: int, *, base_s: float, max_s: float) -> float:
    """Seconds to wait after the `failures`-th failure in a row: base, 2 x base, 4 x base, ... at most max_s."""
    return float(min(max_s, base_s * 2 ** min(max(failures - 1, 0), 32)))


@dataclass
class TriggerCursor:
    backlog: BacklogState = field(default_factory=BacklogState)
    failures: int = 0  # training runs failed (or canceled) in a row
    failed_run: str | None = None  # the newest of them
    retry_at: float = 0.0  # no request before this time (epoch seconds)

    def to_cursor(self) -> str:
        data = {**asdict(self), "backlog": json.loads(self.backlog.to_cursor())}
        return json.dumps(data, separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_cursor(cls, cursor: str | None) -> TriggerCursor:
        try:
            data = json.loads(cursor) if cursor else {}
        except ValueError:
            return cls()
        if not isinstance(data, dict) or "backlog" not in data:  # an earlier cursor: the backlog alone
            return cls()
        try:
            return cls(
                backlog=BacklogState.from_cursor(json.dumps(data["backlog"])),
                failures=int(data.get("failures", 0)),
                failed_run=data.get("failed_run"),
                retry_at=float(data.get("retry_at", 0.0)),
            )
        except (TypeError, ValueError):
            return cls()

    def note_outcome(self, instance: dg.DagsterInstance, *, base_s: float, max_s: float, now: float) -> None:
        """Count the newest finished training run: a success ends the streak; a new failure extends it and pushes
        the next try back by `retry_delay` from the moment it failed."""
        records = instance.get_run_records(dg.RunsFilter(tags=TRAINING_RUN_TAGS, statuses=FINISHED), limit=1)
        if not records:
            return
        run = records[0]
        if run.dagster_run.status == dg.DagsterRunStatus.SUCCESS:
            self.failures, self.failed_run, self.retry_at = 0, None, 0.0
        elif run.dagster_run.run_id != self.failed_run:
            self.failures += 1
            self.failed_run = run.dagster_run.run_id
            self.retry_at = (run.end_time or now) + retry_delay(self.failures, base_s=base_s, max_s=max_s)


@dataclass(frozen=True)
class LastTraining:
    """The newest checkpoint materialization: its steps and stop reason, and the newest token_blocks
    materialization (storage id) that its run surely saw."""

    run_id: str
    steps: int | None
    stop_reason: str | None
    saw_upto: int

    @property
    def trained_nothing(self) -> bool:
        return self.steps == 0

    @property
    def stopped_at_bound(self) -> bool:
        return bool(self.steps) and self.stop_reason == "max_steps"


def last_training(instance: dg.DagsterInstance) -> LastTraining | None:
    records = instance.fetch_materializations(CHECKPOINT_KEY, limit=1).records
    if not records:
        return None
    record = records[0]
    meta = plain_metadata(record.asset_materialization)
    steps = meta.get("steps")
    saw_upto = 0
    if steps == 0:  # only then does it matter what the run had seen
        run = instance.get_run_record_by_id(record.run_id) if record.run_id else None
        started = (run.start_time if run else None) or record.timestamp
        seen = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=TOKEN_BLOCKS_KEY, before_timestamp=started), limit=1
        ).records
        saw_upto = seen[0].storage_id if seen else 0
    return LastTraining(
        run_id=record.run_id,
        steps=int(steps) if isinstance(steps, (int, float)) else None,
        stop_reason=meta.get("stop_reason"),
        saw_upto=saw_upto,
    )


def hold_trigger(instance: dg.DagsterInstance, owner: str, *, seconds: float, now: float) -> None:
    """Hold the trigger for `owner` until `now + seconds` (or until `release_trigger(owner)`)."""
    value = json.dumps({"owner": owner, "until": now + seconds})
    instance.run_storage.set_cursor_values({HOLD_KEY: value})


def release_trigger(instance: dg.DagsterInstance, owner: str) -> None:
    """End `owner`'s hold; another owner's hold stays."""
    hold = _read_hold(instance)
    if hold and hold.get("owner") == owner:
        instance.run_storage.set_cursor_values({HOLD_KEY: "{}"})


def active_hold(instance: dg.DagsterInstance, now: float) -> dict | None:
    """The hold in force at `now` ({"owner", "until"}), if any."""
    hold = _read_hold(instance)
    return hold if hold and float(hold.get("until", 0)) > now else None


def _read_hold(instance: dg.DagsterInstance) -> dict | None:
    raw = instance.run_storage.get_cursor_values({HOLD_KEY}).get(HOLD_KEY)
    try:
        hold = json.loads(raw) if raw else None
    except ValueError:
        return None
    return hold if isinstance(hold, dict) else None
