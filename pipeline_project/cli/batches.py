"""`pipeline-project batches [--failed]`: each batch partition with its newest run; the failed ones with their
error and objects (`ops.batches`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from pipeline_project.cli import context
from pipeline_project.cli.errors import fail

batches_app = typer.Typer(
    help="Batch partitions and their runs; --failed: the batches that failed for good, with error and objects.",
    pretty_exceptions_enable=False,
)

DagsterHomeOpt = Annotated[
    Path | None, typer.Option("--dagster-home", help="Dagster instance [env DAGSTER_HOME, else the stack's]")
]


@batches_app.callback(invoke_without_command=True)
def batches(
    failed: Annotated[bool, typer.Option("--failed", help="Only batches that failed for good, with objects")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per line")] = False,
    limit: Annotated[int, typer.Option("--limit", help="The newest N batches (--failed lists every one)")] = 500,
    dagster_home: DagsterHomeOpt = None,
) -> None:
    from pipeline_project.ops.batches import batch_rows

    try:
        settings = context.settings()
        with context.dagster_instance(dagster_home) as instance:
            rows = batch_rows(settings, instance, failed_only=failed, limit=limit)
            typer.echo(f"read: {context.describe_instance(instance)}", err=True)  # stdout stays the rows
    except Exception as err:  # noqa: BLE001 - one line for the user, not a traceback wall
        raise fail(err) from None
    for row in rows:
        if as_json:
            typer.echo(json.dumps(row.as_dict()))
            continue
        typer.echo(f"{row.batch}  {row.status}" + (f"  run {row.run_id}" if row.run_id else ""))
        if row.error:
            typer.echo(f"    {row.step or 'run'}: {row.error}")
        for key in row.objects:
            typer.echo(f"    s3://{settings.bucket}/{key}")
    if failed and not rows:
        typer.echo("no batch has failed for good")
