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


class TopicRecreatedError(StateError):
    """A saved position (or ledger record) belongs to another incarnation of the topic: same name, other topic id,
    or a cursor past the end of the partition, which only a deleted and recreated (or truncated) topic can cause."""

    def __init__(self, message: str, *, saved_id: str | None = None, current_id: str | None = None):
        self.saved_id = saved_id
        self.current_id = current_id
        super().__init__(message)


class DeadLetterLimitError(StreamingError, ValueError):
    """More malformed messages than `LoaderConfig.max_dead_letters`: a misconfiguration (wrong tokenizer or seq_len,
    another producer's topic), not a stray bad message, so the loader stops instead of skipping everything."""


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

    def __init__(self, topic: str, partition: int | None, error: Any, kafka_error: Any = None):
        self.topic = topic
        self.partition = partition
        self.error = error
        self.kafka_error = kafka_error  # the confluent_kafka.KafkaError of the delivery report, when there was one
        where = f"{topic}[{partition}]" if partition is not None and partition >= 0 else topic
        super().__init__(f"delivery to {where} failed: {error}")


class LedgerConflictError(StreamingError, RuntimeError):
    """The ledger already records different content for this key."""


class ProducedDataMismatchError(StreamingError, RuntimeError):
    """The topic does not hold what a ProduceReport claims."""


class DataLossError(StreamingError, RuntimeError):
    """Records a saved position still needed were deleted (retention, delete-records) before they were read.

    `lost` maps partition -> (first offset needed, log start offset now): the offsets in between are gone. Offsets
    count messages (each holding one or more blocks) and transaction markers, so the exact number of lost blocks
    cannot be known any more; `lost_offsets` is the exact number of offsets.
    """

    def __init__(self, topic: str, lost: dict[int, tuple[int, int]], hint: str = ""):
        self.topic = topic
        self.lost = dict(sorted(lost.items()))
        self.lost_offsets = sum(low - first for first, low in self.lost.values())
        ranges = "; ".join(f"{topic}[{p}] offsets [{a}, {b}) ({b - a} offsets)" for p, (a, b) in self.lost.items())
        super().__init__(
            f"{self.lost_offsets} offsets of {topic} were deleted before they were read (below the log start offset): "
            f"{ranges}. Offsets are messages of one or more blocks each plus transaction markers; their blocks "
            f"are lost." + (f" {hint}" if hint else "")
        )


class VisibilityTimeoutError(StreamingError, TimeoutError):
    """A committed transaction's blocks did not become visible to read_committed readers (the last stable offset did
    not pass them) in time: another producer's open transaction on the same partitions holds it back."""


class ReadTimeoutError(StreamingError, TimeoutError):
    """A read did not reach the end it must reach (a ledger's end, a bounded partition's end offset) in time."""


# -- Kafka error helpers ----------------------------------------------------------------------

_TRANSIENT_CODES = {
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.NOT_LEADER_FOR_PARTITION,
    # the client's leader epoch is older / newer than the broker's: a leader moved (a broker host cut off) and
    # the client's metadata is stale; Kafka documents both as retriable after a metadata refresh
    KafkaError.FENCED_LEADER_EPOCH,
    KafkaError.UNKNOWN_LEADER_EPOCH,
    KafkaError.OFFSET_NOT_AVAILABLE,  # ListOffsets during a leader election
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
