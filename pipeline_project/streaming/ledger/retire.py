"""Retire a batch's ledger entry, so the batch can be produced afresh with other content; and describe an entry.

A batch partly produced (or produced) with content A whose input now cleans to content B is stuck: the producer
refuses to mix B into A's blocks. The two ways out are to resume (clean back to A, and `token_blocks` finishes
it) or to retire A. `retire_entry` is one Kafka transaction on the ledger, under the batch's own transactional id
(so `init_transactions` first fences any producer of the batch still running and aborts its open transaction;
so does the transactional id the entry records, when another prefix wrote it):

* tombstones for the key's completion and progress records, so the key reads as never produced;
* the audit log `<key>#retired` (`retirements`), extended by the retired record with reason, operator and time.

A's committed blocks stay in the topic (Kafka cannot delete from a partition's middle), but before the ledger's
transaction the retired entry's messages are retracted (`retractions`, request `retire:<key>:<content hash>`): no
loader trains them from then on, and the step logs say which steps already had. The audit record says which offsets
hold them, and the next completion record of the key counts them as `retired_blocks`. Content A
itself can never be produced under the key again in the same topic (its blocks would be there twice). After the
commit the ledger is read once through `index`, so the PostgreSQL ledger index holds the tombstones and the
audit record too.
"""

from __future__ import annotations

import getpass
import logging
import socket
from dataclasses import asdict
from typing import Any

from confluent_kafka import KafkaException

from pipeline_project.streaming.errors import ReadTimeoutError, StreamingError, VisibilityTimeoutError
from pipeline_project.streaming.kafka.client import DeliveryTracker, KafkaSettings, flush_or_raise, transactional_id_for
from pipeline_project.streaming.kafka.visibility import wait_until_visible
from pipeline_project.streaming.ledger.index import LedgerIndex
from pipeline_project.streaming.ledger.records import (
    LedgerRecords,
    ledger_topic,
    progress_key,
    read_ledger_records,
    retired_key,
)
from pipeline_project.streaming.ledger.retirements import Retirement, retirements_to_json
from pipeline_project.streaming.retractions.model import Retraction
from pipeline_project.streaming.retractions.resolve import batch_messages
from pipeline_project.streaming.retractions.topic import write_retraction

log = logging.getLogger(__name__)


class NothingToRetireError(StreamingError, ValueError):
    """The ledger key has neither a completion nor a progress record."""


def default_operator() -> str:
    try:
        return f"{getpass.getuser()}@{socket.gethostname()}"
    except (KeyError, OSError):
        return f"unknown@{socket.gethostname()}"


def retire_entry(
    settings: KafkaSettings,
    topic: str,
    ledger_key: str,
    reason: str,
    *,
    operator: str | None = None,
    index: LedgerIndex | None = None,
    timeout_s: float = 30.0,
) -> list[Retirement]:
    """Retire the completion and/or progress record of `ledger_key`; returns the retirements written."""
    if not reason.strip():
        raise ValueError("a retirement needs a reason (it is kept in the ledger's audit record)")
    txid = transactional_id_for(settings, topic, ledger_key)
    producer = settings.make_transactional_producer(txid)
    records = read_ledger_records(settings, topic, timeout_s, keys=[ledger_key], index=index)
    if _fence_recorded_writers(settings, records, ledger_key, txid):  # written under another prefix
        records = read_ledger_records(settings, topic, timeout_s, keys=[ledger_key], index=index)
    operator = operator or default_operator()
    done = []
    if ledger_key in records.completed:
        done.append(Retirement("completed", _as_json(records.completed[ledger_key]), reason, operator))
    if ledger_key in records.progress:
        done.append(Retirement("progress", _as_json(records.progress[ledger_key]), reason, operator))
    if not done:
        raise NothingToRetireError(
            f"ledger {ledger_topic(topic)} has no completion or progress record for {ledger_key!r}: nothing to retire"
        )
    # first, so a crash before the ledger's commit leaves the entry to retire again (the retraction is then a no-op)
    for r in done:
        retract_retired(settings, topic, ledger_key, r, timeout_s)
    ledger = ledger_topic(topic)
    earlier = records.retired.get(ledger_key, [])
    tracker = _commit_retirements(producer, ledger, ledger_key, done, earlier, timeout_s)
    last = {(t, p): hi for (t, p), (_lo, hi) in tracker.offsets.items()}
    try:  # the index takes the commit now; failing that, at the next read (Kafka is the truth)
        wait_until_visible(settings.make_admin(), last, timeout_s)
        read_ledger_records(settings, topic, timeout_s, keys=[ledger_key], index=index)
    except (ReadTimeoutError, VisibilityTimeoutError) as exc:
        log.warning("retired %s, but the ledger index is not updated yet: %s", ledger_key, exc)
    for r in done:
        log.warning(
            "retired the %s entry of %s in %s (content %s, %d blocks at %s stay in the topic): %s",
            r.kind,
            ledger_key,
            ledger,
            r.content_hash,
            r.blocks,
            r.offsets,
            reason,
        )
    return done


def retirement_request(ledger_key: str, retirement: Retirement) -> str:
    """The retraction request of a retired entry: one per batch and content, so retiring again writes nothing."""
    return f"retire:{ledger_key}:{retirement.content_hash[:16]}"


def retract_retired(
    settings: KafkaSettings, topic: str, ledger_key: str, retirement: Retirement, timeout_s: float = 30.0
) -> Retraction | None:
    """Retract the messages of a retired entry (`retractions`): the loader never trains them again. None when the
    entry wrote no message."""
    record = retirement.record
    messages = batch_messages(
        settings, topic, record.get("offsets") or {}, record.get("source") or ledger_key, timeout_s
    )
    if not messages:
        return None
    retraction = Retraction(
        request_id=retirement_request(ledger_key, retirement),
        reason=f"ledger retire: {retirement.reason}",
        blocks=messages,
        operator=retirement.operator,
    )
    write_retraction(settings, topic, retraction, timeout_s)
    return retraction


def _commit_retirements(
    producer, ledger: str, ledger_key: str, done: list[Retirement], earlier: list[Retirement], timeout_s: float
) -> DeliveryTracker:
    """One transaction: a tombstone for each record `done` retires, and the key's audit record holding every
    retirement (`earlier` ones first)."""
    tracker = DeliveryTracker()
    producer.begin_transaction()
    try:
        for r in done:
            key = ledger_key if r.kind == "completed" else progress_key(ledger_key)
            producer.produce(ledger, key=key.encode(), value=None, on_delivery=tracker.on_delivery)
        value = retirements_to_json(ledger_key, [*earlier, *done])
        producer.produce(ledger, key=retired_key(ledger_key).encode(), value=value, on_delivery=tracker.on_delivery)
        flush_or_raise(producer, tracker, timeout_s)
        producer.commit_transaction(timeout_s)
    except BaseException:
        try:
            producer.abort_transaction(timeout_s)
        except KafkaException as exc:  # fenced: the broker aborts it
            log.warning("abort of the retirement transaction of %s failed: %s", ledger_key, exc)
        raise
    return tracker


def _fence_recorded_writers(settings: KafkaSettings, records: LedgerRecords, ledger_key: str, txid: str) -> bool:
    """Fence the transactional ids the key's records were written under, when not this one (another
    transactional_id_prefix): their open transactions end, so a second read is final. True when there were any."""
    entries = (records.completed.get(ledger_key), records.progress.get(ledger_key))
    others = {e.transactional_id for e in entries if e is not None and e.transactional_id} - {txid}
    for other in sorted(others):
        settings.make_transactional_producer(other)
    return bool(others)


def _as_json(record: Any) -> dict[str, Any]:
    d = asdict(record)
    d["offsets"] = {str(p): list(r) for p, r in record.offsets.items()}
    d.pop("reused", None)
    return d


def describe_entry(records: LedgerRecords, ledger_key: str) -> dict[str, Any]:
    """What the ledger holds for `ledger_key`, JSON-ready: the entry (completed, in progress or none) and the
    retirements, with the blocks each accounts for in the topic."""
    completed = records.completed.get(ledger_key)
    progress = records.progress.get(ledger_key)
    retired = records.retired.get(ledger_key, [])
    state = "completed" if completed else "in progress" if progress else "retired" if retired else "absent"
    return {
        "ledger_key": ledger_key,
        "state": state,
        "completed": _as_json(completed) if completed else None,
        "progress": _as_json(progress) if progress else None,
        "retired": [asdict(r) for r in retired],
        "blocks_in_topic": {
            "entry": (completed or progress).blocks if (completed or progress) else 0,
            "retired": sum(r.blocks for r in retired),
        },
    }
