"""`pipeline-project ledger show | retire`: a batch's records in the Kafka ledger of the token topic (`ops.ledger`)."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from pipeline_project.cli import context
from pipeline_project.cli.errors import fail

ledger_app = typer.Typer(
    help="The Kafka ledger of the token topic: show a batch's records, retire a batch's entry.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)

TopicOpt = Annotated[str | None, typer.Option("--topic", help="Token topic [env PIPELINE_TOPIC]")]


@ledger_app.command("show")
def show(batch: Annotated[str, typer.Argument(help="The batch (ledger key)")], topic: TopicOpt = None) -> None:
    """Print the batch's ledger entry (completed, in progress or none) and its retirements, as JSON."""
    from pipeline_project.ops import ledger

    try:
        entry = ledger.show(context.settings(), batch, topic)
    except Exception as err:  # noqa: BLE001 - one line for the user, not a traceback wall
        raise fail(err) from None
    typer.echo(json.dumps(entry, indent=2, sort_keys=True))


@ledger_app.command("retire")
def retire(
    batch: Annotated[str, typer.Argument(help="The batch (ledger key)")],
    reason: Annotated[str, typer.Option("--reason", help="Why; kept in the ledger's audit record")],
    topic: TopicOpt = None,
) -> None:
    """Retire the batch's ledger entry (fencing its producers), so it can be produced afresh with new content."""
    from pipeline_project.ops import ledger

    try:
        topic, done = ledger.retire(context.settings(), batch, reason, topic)
    except Exception as err:  # noqa: BLE001 - one line for the user, not a traceback wall
        raise fail(err) from None
    for r in done:
        typer.echo(
            f"retired the {r.kind} entry of {batch} in {topic}.ledger: content {r.content_hash}, {r.blocks} blocks at "
            f"offsets {r.offsets} stay in the topic; audit record {batch}#retired"
        )
