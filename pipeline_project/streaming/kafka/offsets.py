"""ListOffsets that survives a slow or dying broker.

A ListOffsets request to a broker that was just killed, or that a loaded machine serves late, hangs
until its request timeout. One call with the whole budget would turn that into a bare TimeoutError;
`list_offsets` caps each attempt at `ATTEMPT_S`, retries transient failures (after a moved leader's, with the
topic's metadata refreshed) until the deadline, and then raises ReadTimeoutError naming the partitions that
never answered.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import TimeoutError as FutureTimeoutError
from typing import Any

from confluent_kafka import IsolationLevel, KafkaException, TopicPartition
from confluent_kafka.admin import OffsetSpec

from pipeline_project.streaming.errors import ReadTimeoutError, is_transient

ATTEMPT_S = 5.0


def one_attempt(
    admin: Any, pairs: Iterable[tuple[str, int]], spec: OffsetSpec, isolation: IsolationLevel, attempt_s: float
) -> tuple[dict[tuple[str, int], int], str]:
    """One ListOffsets round capped at `attempt_s`: the offsets that came back, and the last transient failure."""
    req = {TopicPartition(t, p): spec for t, p in pairs}
    futures = admin.list_offsets(req, isolation_level=isolation, request_timeout=attempt_s)
    found: dict[tuple[str, int], int] = {}
    last_error = ""
    stale = False
    for tp, fut in futures.items():
        try:
            found[(tp.topic, tp.partition)] = int(fut.result(timeout=attempt_s + 1.0).offset)
        except FutureTimeoutError:
            last_error = f"no answer within {attempt_s:g}s"
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            if err is None or not is_transient(err):
                raise
            last_error, stale = err.str(), True
    if stale:  # a leader moved: librdkafka looks leaders up in its cache, which a metadata request refreshes
        for topic in {tp.topic for tp in req}:
            with contextlib.suppress(KafkaException):
                admin.list_topics(topic=topic, timeout=attempt_s)
    return found, last_error


def attempt_budget(deadline: float) -> float:
    return max(0.5, min(ATTEMPT_S, deadline - time.monotonic()))


def list_offsets(
    admin: Any,
    topic: str,
    partitions: Sequence[int],
    spec: OffsetSpec,
    timeout_s: float,
    isolation: IsolationLevel = IsolationLevel.READ_COMMITTED,
) -> dict[int, int]:
    """{partition: offset} for `spec`; ReadTimeoutError when some partition has no answer within `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    found: dict[int, int] = {}
    while True:
        pending = [(topic, p) for p in partitions if p not in found]
        if not pending:
            return found
        got, last_error = one_attempt(admin, pending, spec, isolation, attempt_budget(deadline))
        found.update({p: off for (_, p), off in got.items()})
        if len(found) < len(partitions):
            if time.monotonic() > deadline:
                missing = ", ".join(f"{topic}[{p}]" for p in partitions if p not in found)
                raise ReadTimeoutError(
                    f"ListOffsets for {missing} did not succeed within {timeout_s:g}s ({last_error or 'no answer'})"
                )
            time.sleep(0.1)
