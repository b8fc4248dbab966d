"""`pipeline-project status`: where a user's work stands (`ops.status`), as lines or one JSON object."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from pipeline_project.cli import context
from pipeline_project.cli.batches import DagsterHomeOpt
from pipeline_project.cli.errors import fail


def status(
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object")] = False,
    limit: Annotated[int, typer.Option("--limit", help="Look at the newest N batches")] = 500,
    lineages: Annotated[int, typer.Option("--lineages", help="Show the N most recently trained lineages")] = 10,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds each service may take to answer")] = 3.0,
    dagster_home: DagsterHomeOpt = None,
) -> None:
    """Batches pending, running and failed (with their objects and ledger entries), the token topic against each
    lineage's saved position (lag), each lineage's newest checkpoint, and any service that fails its check."""
    from pipeline_project.ops.checkpoints import defaults
    from pipeline_project.ops.status import collect_status

    try:
        settings = context.settings()
        with context.dagster_instance(dagster_home) as instance:
            root, lineage = defaults()
            report = collect_status(
                settings, instance, root=root, lineage=lineage, limit=limit, newest=lineages, timeout_s=timeout
            )
            report["instance"] = context.describe_instance(instance)
    except Exception as err:  # noqa: BLE001 - one line for the user, not a traceback wall
        raise fail(err) from None
    if as_json:
        typer.echo(json.dumps(report, sort_keys=True))
        return
    typer.echo(f"read: {report['instance']}")
    for line in _services_lines(report["services"]) + _batch_lines(report["batches"], settings.bucket):
        typer.echo(line)
    for line in _topic_lines(report["topic"]) + _checkpoint_lines(report["checkpoints"]):
        typer.echo(line)


def _services_lines(services: Any) -> list[str]:
    if isinstance(services, dict):
        return [f"services: the checks did not run ({services['error']})"]
    return ["services: every check passes"] if not services else ["services:", *(f"  {s}" for s in services)]


def _batch_lines(batches: dict, bucket: str) -> list[str]:
    if "error" in batches:
        return [f"batches: unknown ({batches['error']})"]
    counts = batches["counts"]
    lines = ["batches: " + (", ".join(f"{n} {name}" for name, n in sorted(counts.items())) or "none yet")]
    for section in ("pending", "running", "failed"):
        for row in batches[section]:
            ledger = row["ledger"]
            where = f"ledger {ledger['state']}, {ledger['blocks']} blocks" if ledger else "ledger unknown"
            run = f"  run {row['run_id']}" if row["run_id"] else ""
            lines.append(f"  {section:8} {row['batch']}  {row['status']}{run}  ({where})")
            if row["error"]:
                lines.append(f"      {row['step'] or 'run'}: {row['error']}")
            lines += [f"      s3://{bucket}/{key}" for key in row["objects"]]
    if "ledger_error" in batches:
        lines.append(f"  (ledger unreadable: {batches['ledger_error']})")
    return lines


def _topic_lines(topic: dict) -> list[str]:
    if "error" in topic:
        return [f"topic {topic['name']}: unknown ({topic['error']})"]
    parts = topic["partitions"]
    if not parts:
        return [f"topic {topic['name']}: not created yet"]
    ends = sum(p["end"] for p in parts.values())
    return [f"topic {topic['name']}: {len(parts)} partitions, end offsets sum {ends:,}"]


def _checkpoint_lines(checkpoints: dict) -> list[str]:
    if "error" in checkpoints:
        return [f"checkpoints: unknown ({checkpoints['error']})"]
    rows = checkpoints["lineages"]
    more = f"; {checkpoints['more']} older lineages not shown" if checkpoints["more"] else ""
    lines = [f"checkpoints (newest per lineage{more}):" if rows else "checkpoints: none yet"]
    for row in rows:
        if row["step"] is None:
            lines.append(f"  {row['lineage']}: no valid latest.json ({row.get('error', 'none')})")
            continue
        lag = f"  lag {row['lag_total']:,} offsets on {row['topic']}" if "lag" in row else ""
        lines.append(f"  {row['lineage']}  step {row['step']}  {row['created_at'][:19]}  {row['uri']}{lag}")
    return lines
