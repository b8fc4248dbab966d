"""The `pipeline-project` command line: typer only. Each command calls `ops/`, `stack/`, `cluster/` or `demo/` and
prints what they return; errors are one line (`errors.fail`)."""

from __future__ import annotations

from importlib.metadata import version as installed_version
from typing import Annotated

import typer

from pipeline_project.cli.batches import batches_app
from pipeline_project.cli.checkpoint import checkpoint_app
from pipeline_project.cli.cluster import cluster_app
from pipeline_project.cli.demo import bad_input, demo
from pipeline_project.cli.ledger import ledger_app
from pipeline_project.cli.retune import retune
from pipeline_project.cli.services import dedup_import, doctor
from pipeline_project.cli.stack import stack_app
from pipeline_project.cli.status import status
from pipeline_project.cli.summary import summary
from pipeline_project.cli.takedown import takedown, why
from pipeline_project.cli.trace import trace_app

DIST_NAME = "pipeline_project"

app = typer.Typer(
    help="Dagster ML data platform: raw text -> cleaned shards -> Kafka token blocks -> DeepSeek checkpoint.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(stack_app, name="stack")
app.add_typer(cluster_app, name="cluster")
app.add_typer(batches_app, name="batches")
app.add_typer(ledger_app, name="ledger")
app.add_typer(trace_app, name="trace")
app.add_typer(checkpoint_app, name="checkpoint")
app.command("status")(status)
app.command("retune")(retune)
app.command("demo")(demo)
app.command("bad-input")(bad_input)
app.command("doctor")(doctor)
app.command("dedup-import")(dedup_import)
app.command("takedown")(takedown)
app.command("why")(why)
app.command("summary")(summary)


def show_version(value: bool) -> None:
    """`--version`: the installed package's version (its metadata), then exit."""
    if value:
        typer.echo(f"pipeline-project {installed_version(DIST_NAME)}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool, typer.Option("--version", callback=show_version, is_eager=True, help="Print the version and exit")
    ] = False,
) -> None:
    pass


if __name__ == "__main__":
    app()
