"""The Kafka ledger of the token topic: a batch's records, and retiring its entry (`streaming.ledger.retire`).

A batch whose input now cleans to other content than the ledger records (completed, or partly produced) is
refused by `cleaned_shards` and `token_blocks`. Retiring writes an audit record into `<topic>.ledger` and
tombstones the entry, so the batch can be produced afresh; the retired blocks stay in the topic. The ledger is
read through its PostgreSQL index when the database answers.
"""

from __future__ import annotations

from typing import Any

from pipeline_project.ops import connect
from pipeline_project.settings import Settings


def show(settings: Settings, batch: str, topic: str | None = None) -> dict[str, Any]:
    """The batch's ledger entry (completed, in progress or none) and its retirements."""
    from pipeline_project.streaming.ledger.records import read_ledger_records
    from pipeline_project.streaming.ledger.retire import describe_entry

    kafka, topic, index = connect.ledger(settings, topic)
    try:
        records = read_ledger_records(kafka, topic, keys=[batch], index=index)
    finally:
        index.close()
    return {"topic": topic, **describe_entry(records, batch)}


def retire(settings: Settings, batch: str, reason: str, topic: str | None = None) -> tuple[str, list]:
    """Retire the batch's ledger entry (fencing its producers), holding the batch meanwhile (`common.batch_lock`):
    (the topic, the entries retired)."""
    from pipeline_project.common.batch_lock import batch_lock
    from pipeline_project.streaming.ledger.retire import retire_entry

    kafka, topic, index = connect.ledger(settings, topic)
    try:
        with batch_lock(settings.postgres_url, batch):
            return topic, retire_entry(kafka, topic, batch, reason, index=index)
    finally:
        index.close()


def entries(settings: Settings, topic: str | None, keys: list[str]) -> dict[str, dict]:
    """`show` for many batches at once: {batch: {"state", "blocks"}} from one read of the ledger."""
    from pipeline_project.streaming.ledger.records import read_ledger_records
    from pipeline_project.streaming.ledger.retire import describe_entry

    kafka, name, index = connect.ledger(settings, topic)
    try:
        records = read_ledger_records(kafka, name, keys=keys, index=index)
    finally:
        index.close()
    described = {k: describe_entry(records, k) for k in keys}
    return {k: {"state": d["state"], "blocks": d["blocks_in_topic"]["entry"]} for k, d in described.items()}
