"""`pipeline-project trace`: what a training step read, or what a Kafka message holds, down to the raw documents.

    pipeline-project trace step --lineage checkpoints/demo --step 12 [--rank 0]
    pipeline-project trace message --partition 3 --offset 1042

Prints JSON: every block (partition, offset, block index, batch, domain), its token spans, and for each span the
document: the raw S3 object and line, the batch, the shard and position, the cleaning decisions, and whether FIM
rearranged it (`streaming.provenance`).
"""

from __future__ import annotations

import json
from typing import Annotated

import typer

trace_app = typer.Typer(
    help="Trace a training step or a Kafka message back to its documents and raw S3 objects.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)

ShardsOpt = Annotated[str, typer.Option("--shards-prefix", help="Prefix of the published shards")]


def _clients():
    from pipeline_project.settings import KAFKA_SASL_PASSWORD_ENV, Settings, secret
    from pipeline_project.streaming.kafka.client import KafkaSettings

    settings = Settings()
    kafka = KafkaSettings.from_settings(settings, sasl_password=secret(KAFKA_SASL_PASSWORD_ENV))
    return settings, kafka, settings.s3_client()


def _print(result: dict) -> None:
    typer.echo(json.dumps(result, indent=2, sort_keys=True, default=str))


def _fail(err: Exception) -> typer.Exit:
    typer.echo(f"error: {err}", err=True)
    return typer.Exit(1)


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
    from pipeline_project.provenance.trace import trace_step

    if (lineage is None) == (checkpoint is None):
        raise _fail(ValueError("give one of --lineage or --checkpoint"))
    try:
        settings, kafka, s3 = _clients()
        result = trace_step(kafka, s3, settings.bucket, step, rank, checkpoint_prefix=lineage, checkpoint=checkpoint,
                            shards_prefix=shards_prefix)  # fmt: skip
    except Exception as err:  # noqa: BLE001 - one line for the user, not a traceback wall
        raise _fail(err) from None
    _print(result)


@trace_app.command("message")
def message(
    partition: Annotated[int, typer.Option("--partition", help="Kafka partition")],
    offset: Annotated[int, typer.Option("--offset", help="Kafka offset of the message")],
    topic: Annotated[str | None, typer.Option("--topic", help="Token topic [env PIPELINE_TOPIC]")] = None,
    shards_prefix: ShardsOpt = "shards/",
) -> None:
    """Every block of one message, and the documents in them."""
    from pipeline_project.provenance.trace import trace_message

    try:
        settings, kafka, s3 = _clients()
        result = trace_message(kafka, s3, settings.bucket, topic or settings.topic, partition, offset,
                               shards_prefix=shards_prefix)  # fmt: skip
    except Exception as err:  # noqa: BLE001 - one line for the user, not a traceback wall
        raise _fail(err) from None
    _print(result)
