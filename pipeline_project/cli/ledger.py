"""`pipeline-project ledger`: show a batch's records in the Kafka ledger of the token topic, or retire its entry.

A batch whose input now cleans to other content than the ledger records (completed, or partly produced) is
refused by `cleaned_shards` and `token_blocks`. `ledger retire BATCH --reason TEXT` writes an audit record into
`<topic>.ledger` and tombstones the entry, so the batch can be produced afresh; the retired blocks stay in the
topic (see `streaming.ledger_retire`). The ledger is read through its PostgreSQL index when the database answers.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer

ledger_app = typer.Typer(
    help="The Kafka ledger of the token topic: show a batch's records, retire a batch's entry.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)

TopicOpt = Annotated[str | None, typer.Option("--topic", help="Token topic [env PIPELINE_TOPIC]")]


def connect(topic: str | None):
    """Kafka settings, the topic (`topic` or PIPELINE_TOPIC) and the ledger's PostgreSQL index (also `status`'s)."""
    from pipeline_project.settings import KAFKA_SASL_PASSWORD_ENV, Settings, secret
    from pipeline_project.streaming.kafka.client import KafkaSettings
    from pipeline_project.streaming.ledger.index import PostgresLedgerIndex

    settings = Settings()
    kafka = KafkaSettings.from_settings(settings, sasl_password=secret(KAFKA_SASL_PASSWORD_ENV))
    return kafka, topic or settings.topic, PostgresLedgerIndex(settings.postgres_url)


def _fail(err: Exception) -> typer.Exit:
    typer.echo(f"error: {err}", err=True)
    return typer.Exit(1)


@ledger_app.command("show")
def show(batch: Annotated[str, typer.Argument(help="The batch (ledger key)")], topic: TopicOpt = None) -> None:
    """Print the batch's ledger entry (completed, in progress or none) and its retirements, as JSON."""
    from pipeline_project.streaming.ledger.records import read_ledger_records
    from pipeline_project.streaming.ledger.retire import describe_entry

    try:
        kafka, topic, index = connect(topic)
        records = read_ledger_records(kafka, topic, keys=[batch], index=index)
        index.close()
    except Exception as err:  # noqa: BLE001 - one line for the user, not a traceback wall
        raise _fail(err) from None
    typer.echo(json.dumps({"topic": topic, **describe_entry(records, batch)}, indent=2, sort_keys=True))


@ledger_app.command("retire")
def retire(
    batch: Annotated[str, typer.Argument(help="The batch (ledger key)")],
    reason: Annotated[str, typer.Option("--reason", help="Why; kept in the ledger's audit record")],
    topic: TopicOpt = None,
) -> None:
    """Retire the batch's ledger entry (fencing its producers), so it can be produced afresh with new content."""
    from pipeline_project.streaming.ledger.retire import retire_entry

    try:
        kafka, topic, index = connect(topic)
        done = retire_entry(kafka, topic, batch, reason, index=index)
        index.close()
    except Exception as err:  # noqa: BLE001 - one line for the user, not a traceback wall
        raise _fail(err) from None
    for r in done:
        typer.echo(
            f"retired the {r.kind} entry of {batch} in {topic}.ledger: content {r.content_hash}, {r.blocks} blocks at "
            f"offsets {r.offsets} stay in the topic; audit record {batch}#retired"
        )
