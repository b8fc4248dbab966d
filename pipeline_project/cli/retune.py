"""`pipeline-project retune --config NEW.yaml [--batches B ...] [--write]` (`ops.retune`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from pipeline_project.cli import context
from pipeline_project.cli.errors import fail
from pipeline_project.defs.resources.layout import TopicConfig


def print_report(out: dict, write: bool, limit: int = 100) -> None:
    typer.echo(f"{len(out['batches'])} batches, {out['documents']} documents, {out['undecidable']} undecidable")
    for note in out["notes"]:
        typer.echo(f"note: {note}")
    for c in out["changes"]:
        typer.echo(f"{c['domain'] or '-':8} {c['change']:16} {c['detail']}: {c['documents']}")
    if out["affected"]:
        typer.echo(f"affected documents ({len(out['affected'])}): batch, document (S3 object, record), reason")
    for a in out["affected"][:limit]:
        typer.echo(f"  {a['batch']}  {a['doc_id']}  ({a['source']}, record {a['record'] or '-'})  {a['reason']}")
    if len(out["affected"]) > limit:
        typer.echo(f"  ... {len(out['affected']) - limit} more (--json lists them all)")
    for batch, state in out["affected_batches"].items():
        n = sum(1 for a in out["affected"] if a["batch"] == batch)
        if state:
            typer.echo(
                f"batch {batch}: {n} affected, already in the topic ({state})"
                + ("" if write else ": --write retracts their blocks not yet trained and reports the trained ones")
            )
        else:
            typer.echo(f"batch {batch}: {n} affected, not produced yet" + ("" if write else " (--write rewrites it)"))
    if write:
        typer.echo(f"written: {', '.join(out['written']) or 'nothing'}")
        for why in out["refused"].values():
            typer.echo(f"refused: {why}")
        for batch, done in out.get("retracted", {}).items():
            print_retracted(batch, done)


def print_retracted(batch: str, done: dict) -> None:
    """A produced batch written: its retraction, and the exposure (reads the step logs record) by checkpoint."""
    typer.echo(f"batch {batch}: retracted {done['blocks']} blocks (request {done['request'] or '-'})")
    reads = done["exposure"]
    blocks = {(e["partition"], e["offset"], e["block"]) for e in reads}
    typer.echo(f"  exposure: {len(blocks)} blocks already trained, {len(reads)} reads")
    by_checkpoint: dict[tuple[str, str], list[dict]] = {}
    for e in reads:
        by_checkpoint.setdefault((e["lineage"], e["checkpoint"]), []).append(e)
    for (lineage, checkpoint), rows in sorted(by_checkpoint.items()):
        steps = sorted({e["step"] for e in rows})
        typer.echo(
            f"  {lineage}  {checkpoint}  steps {steps[0]}-{steps[-1]}, ranks {sorted({e['rank'] for e in rows})}, "
            f"{sum(e['tokens'] for e in rows)} tokens"
        )


def retune(
    config: Annotated[Path, typer.Option("--config", help="The new cleaning config (YAML or JSON overrides)")],
    batches: Annotated[list[str] | None, typer.Option("--batches", help="Batches to retune (default: all)")] = None,
    write: Annotated[
        bool,
        typer.Option(
            "--write",
            help="Publish the retuned batches; in a produced one, retract the blocks of the documents dropped "
            "and report the ones already trained",
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="The report as JSON")] = False,
    dedup_schema: Annotated[str, typer.Option("--dedup-schema", help="PostgreSQL schema of the dedup index")] = "dedup",
) -> None:
    """What NEW.yaml would change in cleaned batches, from their stored quality signals (no raw text read; a
    decontamination change re-checks the cleaned text). Exits 1 when --write refused a batch."""
    from pipeline_project.defs.resources.layout import PipelineLayout
    from pipeline_project.ops.retune import load_config, run_retune

    try:
        settings = context.settings()
        layout = PipelineLayout(bucket=settings.bucket, topic=TopicConfig(name=settings.topic))
        out = run_retune(settings, layout, load_config(config), batches, write, dedup_schema=dedup_schema)
    except Exception as err:  # noqa: BLE001 - one line for the user, not a traceback wall
        raise fail(err) from None
    if as_json:
        typer.echo(json.dumps(out, indent=2))
    else:
        print_report(out, write)
    if out["refused"]:
        raise typer.Exit(1)
