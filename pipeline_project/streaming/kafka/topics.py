"""Topic layout: create a topic with a given layout, or verify that an existing one has it.

`ensure_topic` returns once every partition has a leader and, for a topic it created, every
leader serves it, so clients may read and write right away. Failures raise `TopicError`; an
existing topic with another layout raises `TopicLayoutMismatchError` naming every difference.

Retention is explicit: topics are created with `retention.ms` and `retention.bytes` of -1 (keep
forever) unless told otherwise, because the broker default (7 days) deletes blocks that saved
loader positions still point to. On an existing topic, a retention SHORTER than asked for (finite
where infinite was asked, or a smaller limit) is a mismatch like any other: it is the setting that
loses data, and it is a one-line fix (`kafka-configs --alter --add-config retention.ms=-1`) that
does not touch the data. A LONGER retention keeps more data than asked and is only logged.
`message_bytes`, when given, is the largest message the caller will write: an existing topic whose
`max.message.bytes` is below it (with room for headers and batch overhead) is a mismatch too, instead
of a broker error in the middle of a batch. `config_mismatches` is the one rule set, shared with the
doctor, and so is `partitions_ok`: a topic may have grown past its configured partition count, never fall
short of it.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, OffsetSpec

from pipeline_project.streaming.errors import TopicError, TopicLayoutMismatchError, TopicMissingError, kafka_error_text
from pipeline_project.streaming.kafka.offsets import attempt_budget

log = logging.getLogger(__name__)

INFINITE = -1  # retention.ms / retention.bytes: never delete
RETENTION_KEYS = ("retention.ms", "retention.bytes")
MESSAGE_BYTES_KEY = "max.message.bytes"


def message_bytes_needed(message_bytes: int) -> int:
    """The topic's max.message.bytes a message value of `message_bytes` needs: headers, record and batch
    overhead, and lz4's worst case on incompressible data (a 1/255 expansion) included."""
    return message_bytes + message_bytes // 128 + 16_384


def config_mismatches(
    wanted: dict[str, Any], actual: dict[str, str | None], message_bytes: int | None = None
) -> list[str]:
    """`<key> expected <wanted>, actual <actual>` for each wanted config the topic does not satisfy.

    Retention keys accept a longer retention (logged by the caller); other keys must be equal. With
    `message_bytes`, a max.message.bytes below `message_bytes_needed(message_bytes)` is a mismatch."""
    diffs = []
    for key, value in wanted.items():
        have = actual.get(key)
        if have == str(value):
            continue
        if key in RETENTION_KEYS and have is not None and not _shorter(int(have), int(value)):
            continue
        diffs.append(f"{key} expected {value}, actual {have}")
    if message_bytes is not None:
        need = message_bytes_needed(message_bytes)
        have = actual.get(MESSAGE_BYTES_KEY)
        if have is None or int(have) < need:
            diffs.append(
                f"{MESSAGE_BYTES_KEY} expected at least {need} (messages of {message_bytes} bytes), actual {have}"
            )
    return diffs


def partitions_ok(actual: int, configured: int) -> bool:
    """A topic may have more partitions than configured (it grew), never fewer."""
    return actual >= configured


@dataclass(frozen=True)
class TopicLayout:
    """What `ensure_topic` found (or made): the topic's layout, and whether this call created it."""

    name: str
    partitions: int
    replication_factor: int
    config: dict[str, str]
    created: bool


def ensure_topic(
    admin: AdminClient,
    name: str,
    partitions: int = 8,
    replication_factor: int = 3,
    min_insync_replicas: int = 2,
    config: dict[str, Any] | None = None,
    timeout_s: float = 30.0,
    *,
    retention_ms: int | None = INFINITE,
    retention_bytes: int | None = INFINITE,
    message_bytes: int | None = None,
) -> TopicLayout:
    """Create `name` with this layout, or verify that the existing topic has it.

    Fewer partitions than `partitions`, or a mismatch in replication factor, min.insync.replicas or any
    given config value raises TopicLayoutMismatchError listing expected vs actual. More partitions are
    accepted: a topic grown with `kafka-topics --alter --partitions` (the loader reads new partitions from
    offset 0, `stripes.py`); for retention, only a shorter one
    does (see the module docstring). `retention_ms` / `retention_bytes` None leave retention to the
    broker and unchecked (compacted topics); values in `config` win over them.
    """
    retention = {k: v for k, v in zip(RETENTION_KEYS, (retention_ms, retention_bytes)) if v is not None}
    given = {**retention, **(config or {})}
    wanted = {"min.insync.replicas": str(min_insync_replicas), **{k: str(v) for k, v in given.items()}}
    created = not _exists(admin, name, timeout_s) and _create(
        admin,
        NewTopic(name, num_partitions=partitions, replication_factor=replication_factor, config=wanted),
        timeout_s,
    )
    actual_partitions, actual_rf = _wait_for_leaders(admin, name, timeout_s)
    if created:
        _wait_for_offsets(admin, name, actual_partitions, timeout_s)
    actual_cfg = _describe_topic_config(admin, name, timeout_s)
    diffs = _layout_diffs(name, (partitions, replication_factor), (actual_partitions, actual_rf), wanted, actual_cfg)
    diffs += config_mismatches(wanted, actual_cfg, message_bytes)
    if diffs:
        hint = _fix_hint(name, wanted, diffs, message_bytes)
        raise TopicLayoutMismatchError(f"topic {name!r} exists with a different layout: " + "; ".join(diffs) + hint)
    return TopicLayout(name, actual_partitions, actual_rf, {k: actual_cfg[k] for k in wanted}, created)


def _layout_diffs(
    name: str, configured: tuple[int, int], actual: tuple[int, int], wanted: dict[str, str], actual_cfg: dict[str, str]
) -> list[str]:
    """Partition and replication mismatches of (partitions, replication factor); a longer retention is logged."""
    (partitions, replication_factor), (actual_partitions, actual_rf) = configured, actual
    diffs = []
    if not partitions_ok(actual_partitions, partitions):
        diffs.append(f"partitions expected at least {partitions}, actual {actual_partitions}")
    elif actual_partitions > partitions:
        log.info("topic %r has grown to %d partitions (configured %d): accepted", name, actual_partitions, partitions)
    if actual_rf != replication_factor:
        diffs.append(f"replication_factor expected {replication_factor}, actual {actual_rf}")
    for key in RETENTION_KEYS:
        have, value = actual_cfg.get(key), wanted.get(key)
        if value is not None and have is not None and have != value and not _shorter(int(have), int(value)):
            log.warning("topic %r keeps data longer than asked: %s is %s, asked %s", name, key, have, value)
    return diffs


def _fix_hint(name: str, wanted: dict[str, str], diffs: list[str], message_bytes: int | None) -> str:
    """The kafka-configs command that fixes the config mismatches in place ("" when none is a config)."""
    # every config, unlike partitions and replication, can be changed in place
    alter = [f"{k}={v}" for k, v in wanted.items() if any(d.startswith(f"{k} ") for d in diffs)]
    if any(d.startswith(f"{MESSAGE_BYTES_KEY} ") for d in diffs):
        alter.append(f"{MESSAGE_BYTES_KEY}={message_bytes_needed(message_bytes or 0)}")
    if not alter:
        return ""
    why = (
        "a shorter retention deletes blocks before every trainer has read them; "
        if any(d.startswith(RETENTION_KEYS) for d in diffs)
        else ""
    )
    return (
        f" ({why}fix it in place with kafka-configs --alter --entity-type topics --entity-name {name} "
        f"--add-config {','.join(alter)})"
    )


def _exists(admin: AdminClient, name: str, timeout_s: float) -> bool:
    """Does the topic exist, by metadata any reachable broker serves? Asked before CreateTopics, which librdkafka
    sends to the broker it takes for the controller: one that is unreachable (a cut host) would fail the call for
    a topic that needs no creating. DescribeTopics, never a metadata request that could auto-create it. Attempts
    are short: an admin client connected before a cut sends every request over its one connection, to the cut
    broker, until `socket.timeout.ms` (`kafka_client.ADMIN_DEFAULTS`, 10 s) drops it and the next attempt reaches
    a live one. No answer by `timeout_s` leaves it to create."""
    deadline = time.monotonic() + timeout_s
    while True:
        budget = attempt_budget(deadline)
        future = admin.describe_topics(TopicCollection([name]), request_timeout=budget)[name]
        try:
            future.result(timeout=budget + 1.0)
            return True
        except TimeoutError:
            problem = f"no answer within {budget:g}s"
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            if isinstance(err, KafkaError) and err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                return False
            problem = kafka_error_text(exc)
        if time.monotonic() >= deadline:
            log.info("describing topic %r: %s; trying to create it", name, problem)
            return False


def _create(admin: AdminClient, new: NewTopic, timeout_s: float) -> bool:
    """CreateTopics; True if this call created it, False if it already existed (created in between)."""
    future = admin.create_topics([new], operation_timeout=timeout_s, request_timeout=timeout_s)[new.topic]
    try:
        future.result(timeout=timeout_s)
        return True
    except TimeoutError:
        raise TopicError(
            f"creating topic {new.topic!r}: no answer within {timeout_s:g}s "
            "(is the broker clients take for the controller reachable?)"
        ) from None
    except KafkaException as exc:
        err = exc.args[0] if exc.args else None
        if not (isinstance(err, KafkaError) and err.code() == KafkaError.TOPIC_ALREADY_EXISTS):
            raise TopicError(f"creating topic {new.topic!r} failed: {kafka_error_text(exc)}") from None
        return False


def _shorter(actual: int, wanted: int) -> bool:
    """Does retention `actual` delete data sooner than `wanted` (-1 meaning never)?"""
    if actual < 0:
        return False
    return wanted < 0 or actual < wanted


def topic_id(admin: AdminClient, name: str, timeout_s: float = 30.0) -> str:
    """The topic's id (a base64 UUID): a deleted and recreated topic of the same name has another one."""
    future = admin.describe_topics(TopicCollection([name]), request_timeout=timeout_s)[name]
    try:
        return str(future.result(timeout=timeout_s).topic_id)
    except KafkaException as exc:
        raise TopicMissingError(f"describing topic {name!r} failed: {kafka_error_text(exc)}") from None


def _wait_for_leaders(admin: AdminClient, name: str, timeout_s: float) -> tuple[int, int]:
    """Wait until metadata shows every partition with a leader; return (partitions, replication factor)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:  # short attempts: the broker a metadata request goes to can be an unreachable one
            md = admin.list_topics(topic=name, timeout=attempt_budget(deadline)).topics.get(name)
        except KafkaException as exc:
            if time.monotonic() > deadline:
                raise TopicError(
                    f"topic {name!r}: no metadata within {timeout_s:g}s: {kafka_error_text(exc)}"
                ) from None
            time.sleep(0.2)
            continue
        ready = (
            md is not None and md.error is None and md.partitions and all(p.leader >= 0 for p in md.partitions.values())
        )
        if ready:
            rf = min(len(p.replicas) for p in md.partitions.values())
            return len(md.partitions), rf
        if time.monotonic() > deadline:
            err = md.error.str() if md is not None and md.error is not None else "no leaders"
            raise TopicError(f"topic {name!r} not ready within {timeout_s:g}s: {err}")
        time.sleep(0.2)


def _wait_for_offsets(admin: AdminClient, name: str, partitions: int, timeout_s: float) -> None:
    """Wait until every partition leader answers ListOffsets: metadata can name a leader a moment
    before that broker serves the new partition, and clients reading right away would fail."""
    deadline = time.monotonic() + timeout_s
    pending = {TopicPartition(name, p) for p in range(partitions)}
    while pending:
        futures = admin.list_offsets({tp: OffsetSpec.earliest() for tp in pending}, request_timeout=timeout_s)
        for tp, fut in futures.items():
            try:
                fut.result(timeout=timeout_s)
                pending.discard(tp)
            except KafkaException as exc:
                if time.monotonic() > deadline:
                    raise TopicError(
                        f"topic {name!r} partitions not serving within {timeout_s:g}s: {kafka_error_text(exc)}"
                    ) from None
        if pending:
            # librdkafka's ListOffsets looks leaders up in its metadata cache, which can keep a
            # leaderless entry from the moment of creation ("No leaders found", about 1 in 150
            # creations here); a metadata request for the topic refreshes that entry.
            log.debug("topic %r: %d partition(s) not serving yet; refreshing metadata", name, len(pending))
            admin.list_topics(topic=name, timeout=timeout_s)
            time.sleep(0.2)


def _describe_topic_config(admin: AdminClient, name: str, timeout_s: float) -> dict[str, str]:
    """Topic configs; retried while a just-created topic has not reached every broker's metadata."""
    resource = ConfigResource(ConfigResource.Type.TOPIC, name)
    deadline = time.monotonic() + timeout_s
    while True:
        budget = attempt_budget(deadline)  # short attempts, as in _exists
        try:
            entries = admin.describe_configs([resource], request_timeout=budget)[resource].result(timeout=budget + 1)
            return {k: e.value for k, e in entries.items()}
        except TimeoutError:
            if time.monotonic() > deadline:
                raise TopicError(f"describing topic {name!r}: no answer within {timeout_s:g}s") from None
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            retriable = isinstance(err, KafkaError) and (
                err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART or err.code() == KafkaError._TIMED_OUT
            )
            if not retriable or time.monotonic() > deadline:
                raise TopicError(f"describing topic {name!r} failed: {kafka_error_text(exc)}") from None
            time.sleep(0.2)


# how long a data topic created a moment ago may stay unknown to the broker that answers a metadata request
METADATA_PROPAGATION_S = 10.0


def ensure_companion_topic(admin: AdminClient, topic: str, name: str, timeout_s: float = 30.0) -> None:
    """A compacted one-partition topic `name` beside data topic `topic` (its ledger, its retractions), replicated
    like it. The data topic may have been created a moment ago: its metadata is waited for a little."""
    deadline = time.monotonic() + min(timeout_s, METADATA_PROPAGATION_S)
    while True:
        md = admin.list_topics(topic=topic, timeout=timeout_s).topics.get(topic)
        if md is not None and md.error is None and md.partitions:
            break
        if time.monotonic() >= deadline:
            raise TopicMissingError(f"data topic {topic!r} does not exist; create it with ensure_topic first")
        time.sleep(0.2)
    rf = min(len(p.replicas) for p in md.partitions.values())
    ensure_topic(
        admin,
        name,
        partitions=1,
        replication_factor=rf,
        min_insync_replicas=min(2, rf),
        config={"cleanup.policy": "compact"},
        timeout_s=timeout_s,
        retention_ms=None,  # compaction, not time, decides what a compacted topic keeps
        retention_bytes=None,
    )
