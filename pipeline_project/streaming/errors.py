"""The streaming library's errors: every one subclasses `StreamingError`.

Each also subclasses the builtin its callers caught before this hierarchy existed, so
`except ValueError` / `except RuntimeError` / `except TimeoutError` keep working, while
`except StreamingError` catches everything the library itself raises:

* bad data or state handed to the library (a message, a saved loader state, a rank layout): ValueError;
* a Kafka operation that failed or found the cluster other than expected: RuntimeError;
* a read that did not reach the position it must reach in time: TimeoutError.

Errors of confluent-kafka itself (`KafkaException`) and plain argument checks (`ValueError` for a
non-positive seq_len, say) are raised as they are.
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import KafkaError, KafkaException


class StreamingError(Exception):
    """Base of the errors the streaming library raises."""


# -- data and state ---------------------------------------------------------------------------


class MalformedMessageError(StreamingError, ValueError):
    """A Kafka message that does not follow the wire format (`format.py`), with where it was read."""

    def __init__(self, topic: str, partition: int, offset: int, problem: str):
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.problem = problem
        super().__init__(f"malformed message at {topic}[{partition}]@{offset}: {problem}")


class StateError(StreamingError, ValueError):
    """A loader state that does not fit this loader (other topic, unknown version, ...)."""


class AssignmentError(StreamingError, ValueError):
    """The (world_size, num_workers, partitions) combination cannot feed every rank."""


# -- Kafka operations -------------------------------------------------------------------------


class KafkaUnavailableError(StreamingError, RuntimeError):
    """The bootstrap servers did not answer a metadata request in time."""


class TopicError(StreamingError, RuntimeError):
    """A topic could not be created or described, or did not become ready in time."""


class TopicLayoutMismatchError(TopicError):
    """An existing topic's layout differs from the one asked for."""


class TopicMissingError(TopicError, ValueError):
    """A topic that must already exist is absent or has no readable partitions.

    Also a ValueError: the loader raised ValueError for an unreadable topic before this class existed.
    """


class DeliveryError(StreamingError, RuntimeError):
    """A produced message was not delivered (or was still undelivered when a flush timed out)."""

    def __init__(self, topic: str, partition: int | None, error: Any):
        self.topic = topic
        self.partition = partition
        self.error = error
        where = f"{topic}[{partition}]" if partition is not None and partition >= 0 else topic
        super().__init__(f"delivery to {where} failed: {error}")


class LedgerConflictError(StreamingError, RuntimeError):
    """The ledger already records different content for this key."""


class ProducedDataMismatchError(StreamingError, RuntimeError):
    """The topic does not hold what a ProduceReport claims."""


class ReadTimeoutError(StreamingError, TimeoutError):
    """A read did not reach the end it must reach (a ledger's end, a bounded partition's end offset) in time."""


# -- Kafka error helpers ----------------------------------------------------------------------

_TRANSIENT_CODES = {
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError._TRANSPORT,
    KafkaError._ALL_BROKERS_DOWN,
}


def is_transient(err: KafkaError) -> bool:
    """A consumer error librdkafka recovers from on its own (leader moves, broker restarts): wait it out."""
    return err.retriable() or err.code() in _TRANSIENT_CODES


def kafka_error_text(exc: BaseException) -> str:
    """One line for an exception: the KafkaError's own text when it wraps one."""
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0].str()
    return str(exc)
