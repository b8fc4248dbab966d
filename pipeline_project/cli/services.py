"""`pipeline-project doctor` (is every service reachable and set up?) and `pipeline-project dedup-import`."""

from __future__ import annotations

from typing import Annotated

import typer

from pipeline_project.cli import context
from pipeline_project.cli.errors import fail
from pipeline_project.cli.stack import console


def doctor(
    only: Annotated[
        str | None, typer.Option("--only", help="Comma-separated subset of kafka,s3,mlflow,dagster,postgres")
    ] = None,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds each service may take to answer")] = 5.0,
) -> None:
    """Check Kafka, S3, MLflow, Dagster and PostgreSQL: one line per check with a fix hint; exit 1 if any fails."""
    from pipeline_project.ops.doctor import check_services

    failed = 0
    try:
        for check in check_services(context.settings(), only, timeout):
            typer.echo(check.line())
            failed += not check.ok
    except ValueError as err:
        raise fail(err) from None
    typer.echo(f"{failed} check(s) failed" if failed else "all checks passed")
    raise typer.Exit(1 if failed else 0)


def dedup_import(
    key: Annotated[str, typer.Option("--key", help="The S3 index file of earlier versions")] = "dedup/index.bin",
    schema: Annotated[str, typer.Option("--schema", help="PostgreSQL schema of the dedup index")] = "dedup",
) -> None:
    """Migrate the S3 dedup index file (`s3://$PIPELINE_S3_BUCKET/dedup/index.bin`) into the PostgreSQL index."""
    from pipeline_project.ops.dedup import import_s3_index

    try:
        imported, batches = import_s3_index(context.settings(), key, schema)
    except Exception as err:  # noqa: BLE001 - one line for the user, not a traceback wall
        raise fail(err) from None
    console.print(f"imported {imported:,} documents of {batches} batches into schema {schema!r}")
