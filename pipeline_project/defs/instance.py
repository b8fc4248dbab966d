"""Where each batch partition stands: its newest run, and, for a batch that failed for good, the error and objects.

A batch has failed for good when its newest run failed, Dagster will not retry that run (`dagster/will_retry`),
and `token_blocks` has no materialization of it: the step retries (`NETWORK_RETRY`) and run retries are spent.
Read from the Dagster instance (run storage and event log); the objects come from the batch's manifest in S3.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PARTITION_TAG = "dagster/partition"
WILL_RETRY_TAG = "dagster/will_retry"
DONE_ASSET = "token_blocks"  # a batch is through when its blocks are in the topic


@dataclass(frozen=True)
class BatchOutcome:
    batch: str
    status: str  # "done", "failed", "retrying", "running", "queued", "not started", ...
    run_id: str | None = None
    step: str = ""  # the step that failed
    error: str = ""  # the first line of its error
    objects: tuple[str, ...] = field(default=())  # keys of the manifest (filled for failed batches)

    def as_dict(self) -> dict:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}


def _failures(instance, run_ids: set[str], page: int = 1000) -> dict[str, tuple[str, str]]:
    """Run id -> (the step that failed, the first line of its error) for `run_ids`: the newest step failure of each,
    else its run failure. Read a page of failure events at a time across runs (newest first), so the cost grows
    with the failures on record, not with one query per failed batch."""
    import dagster as dg

    found: dict[str, tuple[str, str]] = {}
    for kind in (dg.DagsterEventType.STEP_FAILURE, dg.DagsterEventType.RUN_FAILURE):
        cursor = None
        while run_ids - found.keys():
            records = instance.event_log_storage.get_event_records(
                dg.EventRecordsFilter(event_type=kind, before_cursor=cursor), limit=page, ascending=False
            )
            for record in records:
                if record.run_id in run_ids and record.run_id not in found:
                    found[record.run_id] = _describe(record.event_log_entry.dagster_event)
            if len(records) < page:
                break
            cursor = records[-1].storage_id
    return found


def _describe(event) -> tuple[str, str]:
    error = getattr(event.event_specific_data, "error", None)
    while error is not None and error.cause is not None:  # "Exceeded max_retries" wraps the error itself
        error = error.cause
    message = (error.message if error is not None else event.message) or ""
    return event.step_key or "", (message.strip().splitlines() or [""])[0]


def _status(batch: str, done: set[str], run) -> tuple[str, object]:
    """A batch's status from whether it is done and its newest run (None: none)."""
    import dagster as dg

    if batch in done:
        return "done", None
    if run is None:
        return "not started", None
    if run.status == dg.DagsterRunStatus.FAILURE:
        return ("retrying" if run.tags.get(WILL_RETRY_TAG) == "true" else "failed"), run
    return run.status.value.lower().replace("_", " "), run


def _newest_runs(instance, names: list[str], page: int = 500) -> dict[str, object]:
    """Batch -> its newest run, for `names`: one query per `page` batches (a batch has a run or a few)."""
    import dagster as dg

    newest: dict[str, object] = {}
    for start in range(0, len(names), page):
        chunk = names[start : start + page]
        for record in instance.get_run_records(filters=dg.RunsFilter(tags={PARTITION_TAG: chunk})):
            newest.setdefault(record.dagster_run.tags.get(PARTITION_TAG), record.dagster_run)  # newest first
    return newest


def batch_outcomes(
    instance, read_manifest=None, *, failed_only: bool = False, limit: int = 500, only: set[str] | None = None
) -> list[BatchOutcome]:
    """The newest `limit` batches, oldest first; with `failed_only`, every batch that failed for good, however old
    (found from the failed runs, never by reading every batch); with `only`, just those batches.
    `read_manifest(batch)` gives a failed batch's manifest, for its objects."""

    from pipeline_project.defs.partitions import batches

    if only is not None:
        names = [b for b in sorted(only) if instance.has_dynamic_partition(batches.name, b)]
    elif failed_only:
        names = batches_with_failed_runs(instance)
    else:
        newest = instance.get_paginated_dynamic_partitions(batches.name, limit=limit, ascending=False).results
        names = list(reversed(newest))
    done = _done(instance, names)
    runs = _newest_runs(instance, [b for b in names if b not in done])
    statuses = {batch: _status(batch, done, runs.get(batch)) for batch in names}
    failing = {run.run_id for status, run in statuses.values() if run is not None and status in ("failed", "retrying")}
    failures = _failures(instance, failing) if failing else {}
    out = []
    for batch in names:
        status, run = statuses[batch]
        if failed_only and status != "failed":
            continue
        if run is None:
            out.append(BatchOutcome(batch, status))
            continue
        step, error = failures.get(run.run_id, ("", "")) if status in ("failed", "retrying") else ("", "")
        objects = ()
        if status == "failed" and read_manifest is not None:
            objects = tuple(o.key for o in read_manifest(batch).objects)
        out.append(BatchOutcome(batch, status, run.run_id, step, error, objects))
    return out


def batches_with_failed_runs(instance, page: int = 1000) -> list[str]:
    """Every batch with at least one failed run, oldest failure first: the failed runs, a page at a time."""
    import dagster as dg

    seen: dict[str, None] = {}
    cursor = None
    while True:
        records = instance.get_run_records(
            filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.FAILURE]), limit=page, cursor=cursor
        )
        for record in records:
            batch = record.dagster_run.tags.get(PARTITION_TAG)
            if batch:
                seen[batch] = None
        if len(records) < page:
            return list(reversed(seen))
        cursor = records[-1].dagster_run.run_id


def _done(instance, names: list[str], page: int = 1000) -> set[str]:
    """Those of `names` that `token_blocks` has a materialization of: one query per `page` batches, whatever the
    number of batches the instance holds."""
    import dagster as dg

    done: set[str] = set()
    for start in range(0, len(names), page):
        chunk = names[start : start + page]
        records_filter = dg.AssetRecordsFilter(asset_key=dg.AssetKey(DONE_ASSET), asset_partitions=chunk)
        cursor = None
        while True:
            found = instance.fetch_materializations(records_filter, limit=page, cursor=cursor)
            done.update(r.partition_key for r in found.records if r.partition_key)
            if not found.has_more:
                break
            cursor = found.cursor
    return done


def open_instance(home: Path | None) -> AbstractContextManager[Any]:
    """The Dagster instance at `home` (a DAGSTER_HOME folder), else $DAGSTER_HOME's; use it in a `with`."""
    import dagster as dg

    return dg.DagsterInstance.from_config(str(home)) if home else dg.DagsterInstance.get()
