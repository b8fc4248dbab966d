"""The client settings the exactly-once guarantee rests on, and the refusal of overrides that would break it.

`KafkaSettings` lets a deployment override any librdkafka property (`producer_overrides`,
`consumer_overrides`). A few of them silently void "each batch's blocks are in the topic exactly once, and
readers see only committed ones", so `KafkaSettings` refuses them with one line naming the property:

producer (the transactional block producer and the ledger's writers)
  * `transactional.id`: the producer derives it per batch (`transactional_id_for`); a fixed one would make
    every batch fence every other;
  * `enable.idempotence` false; `acks` / `request.required.acks` other than all (-1); `retries` /
    `message.send.max.retries` 0; `max.in.flight.requests.per.connection` / `max.in.flight` above 5;
    `queuing.strategy` other than fifo: each loses or reorders records that a transaction commits.
consumer (the loader and the ledger reader)
  * `isolation.level` other than read_committed: aborted blocks and ledger records become visible;
  * `enable.auto.commit` / `auto.commit.enable` true: positions live in checkpoints, never in the group;
  * `auto.offset.reset` other than earliest (smallest, beginning) or error: a ledger read that starts below
    the log start would skip records and produce a batch again.
both
  * `bootstrap.servers` / `metadata.broker.list`: the ledger read and the produce must reach one cluster;
    set `bootstrap_servers`;
  * `default.topic.config`: checked like the top level (librdkafka's legacy place for `acks`).

The transactional id is `<transactional_id_prefix>.<topic>.<ledger key>`: stable for a batch across every
retry (so `init_transactions` fences the zombie of an earlier attempt) and different for every batch. The
prefix must be the same for every writer of a topic, and non-empty without whitespace; `client_id` (what
brokers log and quotas) is free to differ per process and takes no part in it. A partly produced batch whose
progress record names another transactional id is refused (`producer`): its earlier attempt's zombie would
not be fenced.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pipeline_project.streaming.errors import StreamingError


class UnsafeKafkaConfigError(StreamingError):
    """A Kafka setting that would break the exactly-once guarantee. Not a ValueError on purpose: pydantic passes
    it through unwrapped, so the user reads one line, not a validation report."""


def _norm(value: Any) -> str:
    return str(value).strip().lower()


def _is_true(value: Any) -> bool:
    return _norm(value) in {"true", "1", "yes", "on"}


def _is_false(value: Any) -> bool:
    return _norm(value) in {"false", "0", "no", "off"}


def _int_above(limit: int) -> Callable[[Any], bool]:
    def check(value: Any) -> bool:
        try:
            return int(value) > limit
        except (TypeError, ValueError):
            return True

    return check


_CLUSTER = "the ledger read and the produce must reach one cluster: set bootstrap_servers instead"
_ANY = lambda _value: True  # noqa: E731 - a rule table reads better with one-line predicates

# property -> (is the value unsafe?, what it breaks)
PRODUCER_RULES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "transactional.id": (_ANY, "the producer derives it per batch (transactional_id_prefix.<topic>.<batch>)"),
    "enable.idempotence": (_is_false, "an idempotent producer is what keeps retried sends from duplicating"),
    "acks": (lambda v: _norm(v) not in {"all", "-1"}, "a commit must wait for every in-sync replica (acks=all)"),
    "request.required.acks": (lambda v: _norm(v) not in {"all", "-1"}, "acks must be all"),
    "retries": (lambda v: not _int_above(0)(v), "retries=0 loses a record a broker failover would retry"),
    "message.send.max.retries": (lambda v: not _int_above(0)(v), "retries=0 loses records on a failover"),
    "max.in.flight.requests.per.connection": (_int_above(5), "idempotence keeps order only up to 5 in flight"),
    "max.in.flight": (_int_above(5), "idempotence keeps order only up to 5 in flight"),
    "queuing.strategy": (lambda v: _norm(v) != "fifo", "records must be sent in the order they were produced"),
    "bootstrap.servers": (_ANY, _CLUSTER),
    "metadata.broker.list": (_ANY, _CLUSTER),
}
CONSUMER_RULES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "isolation.level": (
        lambda v: _norm(v) != "read_committed",
        "readers must see committed transactions only (read_committed)",
    ),
    "enable.auto.commit": (_is_true, "positions live in checkpoints; the group must never commit them"),
    "auto.commit.enable": (_is_true, "positions live in checkpoints; the group must never commit them"),
    "auto.offset.reset": (
        lambda v: _norm(v) not in {"earliest", "smallest", "beginning", "error"},
        "a ledger read below the log start must restart at the earliest record, not skip records",
    ),
    "bootstrap.servers": (_ANY, _CLUSTER),
    "metadata.broker.list": (_ANY, _CLUSTER),
}


def check_overrides(kind: str, overrides: Mapping[str, Any]) -> None:
    """Raise UnsafeKafkaConfigError for the first override in `overrides` that breaks exactly-once."""
    rules = PRODUCER_RULES if kind == "producer" else CONSUMER_RULES
    for name, value in overrides.items():
        if name == "default.topic.config" and isinstance(value, Mapping):
            check_overrides(kind, value)
            continue
        rule = rules.get(name.strip().lower())
        if rule is not None and rule[0](value):
            raise UnsafeKafkaConfigError(
                f"{kind}_overrides {name}={value!r} is refused: {rule[1]} (exactly-once depends on it)"
            )


def check_identity(field: str, value: str | None) -> None:
    """client_id and transactional_id_prefix: non-empty, no whitespace (librdkafka and ACLs take them verbatim)."""
    if value is None or not value.strip() or any(c.isspace() for c in value):
        raise UnsafeKafkaConfigError(f"{field}={value!r} is refused: it must be a non-empty name without whitespace")
