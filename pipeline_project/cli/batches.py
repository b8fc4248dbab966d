"""`pipeline-project batches [--failed]`: each batch partition with its newest run; the failed ones with their
error and objects (`batch_outcomes`)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated

import typer

batches_app = typer.Typer(
    help="Batch partitions and their runs; --failed: the batches that failed for good, with error and objects.",
    pretty_exceptions_enable=False,
)


def dagster_instance(home: Path | None):
    """The Dagster instance at `home`, else $DAGSTER_HOME's, else the local stack's (also `status`'s)."""
    import dagster as dg

    if home is None and not os.environ.get("DAGSTER_HOME"):
        from pipeline_project.stack import Stack

        home = Stack().services["dagster"].home
    return dg.DagsterInstance.from_config(str(home)) if home else dg.DagsterInstance.get()


@batches_app.callback(invoke_without_command=True)
def batches(
    failed: Annotated[bool, typer.Option("--failed", help="Only batches that failed for good, with objects")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per line")] = False,
    limit: Annotated[int, typer.Option("--limit", help="The newest N batches")] = 500,
    dagster_home: Annotated[
        Path | None, typer.Option("--dagster-home", help="Dagster instance [env DAGSTER_HOME, else the stack's]")
    ] = None,
) -> None:
    from pipeline_project.defs.instance import batch_outcomes
    from pipeline_project.ingest.manifest import read_manifest
    from pipeline_project.settings import Settings

    try:
        settings = Settings()
        s3 = settings.s3_client()
        with dagster_instance(dagster_home) as instance:
            rows = batch_outcomes(
                instance, lambda b: read_manifest(s3, settings.bucket, b), failed_only=failed, limit=limit
            )
    except Exception as err:  # noqa: BLE001 - one line for the user, not a traceback wall
        typer.echo(f"error: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}", err=True)
        raise typer.Exit(1) from None
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
