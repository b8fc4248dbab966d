"""`pipeline-project trace`: what a training step read, or what a Kafka message holds, down to the raw documents.

    pipeline-project trace step --lineage checkpoints/demo --step 12 [--rank 0]
    pipeline-project trace message --partition 3 --offset 1042

Prints JSON: every block (partition, offset, block index, batch, publication, domain), its token spans, and for
each span the document: the raw S3 object and line, the batch and the publication (the shard manifest's content
hash the message's `pub` header names; the batch's current manifest for a message produced before that header),
the shard and position, the cleaning decisions, and whether FIM rearranged it (`provenance.trace`).
"""

from __future__ import annotations

import json
from typing import Annotated

import typer

from pipeline_project.cli import context
from pipeline_project.cli.errors import fail

trace_app = typer.Typer(
    help="Trace a training step or a Kafka message back to its documents and raw S3 objects.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)

ShardsOpt = Annotated[str, typer.Option("--shards-prefix", help="Prefix of the published shards")]


def _print(result: dict) -> None:
    typer.echo(json.dumps(result, indent=2, sort_keys=True, default=str))


@trace_app.command("step")
def step(
    step: Annotated[int, typer.Option("--step", help="The global training step (1-based)")],
    lineage: Annotated[
        str | None, typer.Option("--lineage", help="Checkpoint prefix of the lineage (holds latest.json)")
    ] = None,
    checkpoint: Annotated[
        str | None, typer.Option("--checkpoint", help="Start from this checkpoint URI instead of latest.json")
    ] = None,
    rank: Annotated[int, typer.Option("--rank", help="The rank whose batch to trace")] = 0,
    shards_prefix: ShardsOpt = "shards/",
) -> None:
    """The blocks `rank` trained at `step`, and the documents in them."""
    from pipeline_project.ops import trace

    try:
        result = trace.step(
            context.settings(), step, rank, lineage=lineage, checkpoint=checkpoint, shards_prefix=shards_prefix
        )
    except Exception as err:  # noqa: BLE001 - one line for the user, not a traceback wall
        raise fail(err) from None
    _print(result)


@trace_app.command("message")
def message(
    partition: Annotated[int, typer.Option("--partition", help="Kafka partition")],
    offset: Annotated[int, typer.Option("--offset", help="Kafka offset of the message")],
    topic: Annotated[str | None, typer.Option("--topic", help="Token topic [env PIPELINE_TOPIC]")] = None,
    shards_prefix: ShardsOpt = "shards/",
) -> None:
    """Every block of one message, and the documents in them."""
    from pipeline_project.ops import trace

    try:
        result = trace.message(context.settings(), partition, offset, topic=topic, shards_prefix=shards_prefix)
    except Exception as err:  # noqa: BLE001 - one line for the user, not a traceback wall
        raise fail(err) from None
    _print(result)
