"""What the loader checks before it reads: the topic's identity, and the cursors against the partitions' offsets.

* `describe_topic`: the topic's partitions and id; an unreadable topic is TopicMissingError.
* `check_cursors`: a cursor below its partition's log start offset needs records that are gone
  (retention or delete-records removed them before they were read). Without the opt-in that is a
  DataLossError naming each partition and the exact number of offsets lost; with
  `allow_data_loss` the cursor moves to the log start, a warning is logged and the skipped range
  returned, for the loader to count. A cursor past the log end offset can only point into another
  incarnation of the topic (deleted and recreated, or truncated): TopicRecreatedError. Positions
  are never moved silently; the loader's consumers also run with `auto.offset.reset=error`, so a
  deletion that happens while training is caught the same way (`partition_reader`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import IsolationLevel
from confluent_kafka.admin import OffsetSpec

from pipeline_project.streaming.errors import DataLossError, TopicMissingError, TopicRecreatedError
from pipeline_project.streaming.kafka.offsets import list_offsets
from pipeline_project.streaming.kafka.topics import topic_id
from pipeline_project.streaming.load.state import Cursor

log = logging.getLogger(__name__)

DATA_LOSS_HINT = (
    "Set LoaderConfig.allow_data_loss=True to skip them (counted in metrics()['data_loss_offsets']); give the "
    "topic retention.ms=-1 so it does not happen again."
)


@dataclass(frozen=True)
class SkippedRange:
    """Offsets [first, low) of a partition were deleted before they were read, and skipped by opt-in."""

    partition: int
    first: int
    low: int

    @property
    def offsets(self) -> int:
        return self.low - self.first

    def as_dict(self) -> dict[str, int]:
        return {"partition": self.partition, "first": self.first, "low": self.low, "offsets": self.offsets}


def describe_topic(admin: Any, topic: str, timeout_s: float) -> tuple[tuple[int, ...], str]:
    """(sorted partitions, topic id) of a readable topic."""
    md = admin.list_topics(topic=topic, timeout=timeout_s).topics.get(topic)
    if md is None or md.error is not None or not md.partitions:
        problem = md.error.str() if md is not None and md.error is not None else "no partitions"
        raise TopicMissingError(f"topic {topic!r} is not readable: {problem}")
    return tuple(sorted(md.partitions)), topic_id(admin, topic, timeout_s)


def partition_bounds(
    admin: Any, topic: str, partitions: Sequence[int], timeout_s: float
) -> tuple[dict[int, int], dict[int, int]]:
    """(log start offsets, log end offsets) of the partitions, as the brokers report them now."""
    low = list_offsets(admin, topic, partitions, OffsetSpec.earliest(), timeout_s)
    high = list_offsets(admin, topic, partitions, OffsetSpec.latest(), timeout_s, IsolationLevel.READ_UNCOMMITTED)
    return low, high


def check_cursors(
    topic: str,
    cursors: Mapping[int, Cursor],
    *,
    low: Mapping[int, int],
    high: Mapping[int, int],
    allow_data_loss: bool,
) -> tuple[dict[int, Cursor], list[SkippedRange]]:
    """The cursors to read from, and the ranges skipped by opt-in; raises as the module docstring says."""
    beyond = {p: c.offset for p, c in cursors.items() if p in high and c.offset > high[p]}
    if beyond:
        where = "; ".join(f"partition {p} cursor {off} > log end {high[p]}" for p, off in sorted(beyond.items()))
        raise TopicRecreatedError(
            f"saved cursors of topic {topic!r} lie past the end of their partitions ({where}): offsets never move "
            "backwards, so the topic was deleted and recreated (or truncated) since they were saved"
        )
    lost = {p: (c.offset, low[p]) for p, c in cursors.items() if p in low and c.offset < low[p]}
    if not lost:
        return dict(cursors), []
    if not allow_data_loss:
        raise DataLossError(topic, lost, DATA_LOSS_HINT)
    skipped = [SkippedRange(p, first, lo) for p, (first, lo) in sorted(lost.items())]
    log.warning("%s", DataLossError(topic, lost, "Skipping them: allow_data_loss is set."))
    out = dict(cursors)
    for s in skipped:
        out[s.partition] = Cursor(s.low)
    return out, skipped
