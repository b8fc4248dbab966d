"""Where a user's work stands, in one JSON-ready dict, from the code behind the other
commands: the services (`doctor.check_services`, failing checks only), the batches pending, running and failed
(`batch_outcomes`, with each one's objects and its ledger entry as `ledger show` describes it), the token topic's
offsets against the position each lineage's newest checkpoint saved (the trainer's lag), and each lineage's
newest checkpoint (`training.lineages`). A section whose service does not answer carries `error` (one line)
instead of its content; the others are still filled.

Lag counts offsets: a transaction leaves one commit marker per partition it wrote, so the number of blocks
behind is at most this. Partitions the checkpoint never read count from their earliest offset.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pipeline_project.common.errors import describe
from pipeline_project.settings import Settings

RUNNING = ("started", "starting", "canceling")
PENDING = ("not started", "queued", "managed", "retrying")
SHOWN = ("pending", "running", "failed")


def _section(build: Callable[[], Any]) -> Any:
    try:
        return build()
    except Exception as exc:  # noqa: BLE001 - one section's service is down: say so, fill the others
        return {"error": describe(exc)}


def group(status: str) -> str:
    """The status section a `batch_outcomes` status belongs to."""
    if status in RUNNING:
        return "running"
    if status in PENDING:
        return "pending"
    return status if status in ("done", "failed") else "other"


def services(settings: Settings, timeout_s: float) -> list[str]:
    """The doctor's failing checks, one line each (the fix hint included)."""
    from pipeline_project.ops.doctor import check_services

    return [c.line() for c in check_services(settings, timeout_s=timeout_s) if not c.ok]


def batches(settings: Settings, instance, ledger: Callable[[list[str]], dict[str, dict]], limit: int) -> dict:
    """Counts per section, and the pending, running and failed batches with their ledger entries."""
    from pipeline_project.defs.instance import batch_outcomes
    from pipeline_project.ingest.manifest import read_manifest

    s3 = settings.s3_client()
    rows = batch_outcomes(instance, lambda b: read_manifest(s3, settings.bucket, b), limit=limit)
    shown = [r for r in rows if group(r.status) in SHOWN]
    entries = _section(lambda: ledger([r.batch for r in shown])) if shown else {}
    out: dict[str, Any] = {"counts": {}, **{name: [] for name in SHOWN}}
    for row in rows:
        name = group(row.status)
        out["counts"][name] = out["counts"].get(name, 0) + 1
        if name in SHOWN:
            entry = entries.get(row.batch) if "error" not in entries else None
            out[name].append({**row.as_dict(), "ledger": entry})
    if "error" in entries:
        out["ledger_error"] = entries["error"]
    return out


def ledger_entries(settings: Settings, topic: str | None) -> Callable[[list[str]], dict[str, dict]]:
    """`ledger show` for many batches at once (`ops.ledger.entries`)."""
    from pipeline_project.ops.ledger import entries

    return lambda keys: entries(settings, topic, keys)


def topic_offsets(settings: Settings, timeout_s: float) -> dict[int, tuple[int, int]]:
    """{partition: (earliest, end)} of the token topic, end being the last stable (committed) offset."""
    from confluent_kafka import IsolationLevel
    from confluent_kafka.admin import OffsetSpec

    from pipeline_project.ops.connect import kafka_settings
    from pipeline_project.streaming.kafka.offsets import list_offsets

    admin = kafka_settings(settings).make_admin()
    meta = admin.list_topics(settings.topic, timeout=timeout_s).topics.get(settings.topic)
    if meta is None or meta.error is not None:
        return {}
    parts = sorted(meta.partitions)
    starts = list_offsets(admin, settings.topic, parts, OffsetSpec.earliest(), timeout_s)
    ends = list_offsets(admin, settings.topic, parts, OffsetSpec.latest(), timeout_s, IsolationLevel.READ_COMMITTED)
    return {p: (starts[p], ends[p]) for p in parts}


def lag(offsets: dict[int, tuple[int, int]], position: dict[str, dict[str, Any]]) -> dict[str, int]:
    """{partition: offsets between the saved position (its next message) and the topic's end}."""
    return {
        str(p): max(0, end - max(start, position.get(str(p), {}).get("offset", start)))
        for p, (start, end) in sorted(offsets.items())
    }


def checkpoints(settings: Settings, root: str, offsets: dict, newest: int, pinned: tuple[str, ...] = ()) -> dict:
    """The newest checkpoints of the `pinned` lineages, then of the most recently trained ones (`newest` in all);
    for those that read the token topic, their lag."""
    from pipeline_project.training.checkpoint.lineages import newest_checkpoints, saved_position

    s3 = settings.s3_client()
    heads = sorted(newest_checkpoints(s3, settings.bucket, root), key=lambda h: h.lineage not in pinned)
    rows = []
    for head in heads[:newest]:
        row: dict[str, Any] = {"lineage": head.lineage, "step": None, "uri": None, "created_at": None}
        if head.error:
            row["error"] = head.error
        if head.ref is not None:
            row.update(step=head.ref.step, uri=head.ref.uri, created_at=head.ref.created_at)
            try:
                topic, position = saved_position(s3, settings.bucket, head.ref)
            except Exception as exc:  # noqa: BLE001 - a checkpoint without a readable data state: say so
                topic, position, row["error"] = None, {}, describe(exc)
            row["topic"] = topic
            if topic == settings.topic and "error" not in offsets:
                row["lag"] = lag(offsets, position)
                row["lag_total"] = sum(row["lag"].values())
        rows.append(row)
    return {"lineages": rows, "more": max(0, len(heads) - newest)}


def _topic(settings: Settings, offsets: dict) -> dict[str, Any]:
    if "error" in offsets:
        return {"name": settings.topic, "error": offsets["error"]}
    partitions = {str(p): {"earliest": start, "end": end} for p, (start, end) in offsets.items()}
    return {"name": settings.topic, "partitions": partitions}


def collect_status(
    settings: Settings,
    instance,
    *,
    root: str,
    lineage: str,
    limit: int = 500,
    newest: int = 10,
    timeout_s: float = 3.0,
) -> dict[str, Any]:
    """Every section (see the module's docstring); `instance`: the Dagster instance that ran the batches;
    `lineage` (the trainer's) is shown first."""
    offsets = _section(lambda: topic_offsets(settings, timeout_s))
    return {
        "services": _section(lambda: services(settings, timeout_s)),
        "batches": _section(lambda: batches(settings, instance, ledger_entries(settings, settings.topic), limit)),
        "topic": _topic(settings, offsets),
        "checkpoints": _section(lambda: checkpoints(settings, root, offsets, newest, (lineage,))),
    }
