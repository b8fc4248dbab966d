"""Wait until committed records are visible to read_committed readers.

`commit_transaction` returns once the transaction coordinator has decided the commit, before the
commit markers are written to every partition. Until they are, each partition's last stable
offset (LSO) stays below the transaction's records, so a read_committed reader started right
away (a trainer right after the asset) would not see the batch, and a bounded loader would
capture end offsets without it. `wait_until_visible` polls ListOffsets(latest, read_committed)
until the LSO of every written partition is past its last written offset. Another producer's
transaction still open on one of those partitions holds the LSO back too; the wait is bounded
and then raises VisibilityTimeoutError naming the partitions. A broker that dies during the wait
(a request to it hangs until its timeout) costs one short attempt, never the whole wait: each
ListOffsets round is capped at `ATTEMPT_S` and retried until the deadline.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from concurrent.futures import TimeoutError as FutureTimeoutError
from typing import Any

from confluent_kafka import IsolationLevel, KafkaException, TopicPartition
from confluent_kafka.admin import OffsetSpec

from pipeline_project.streaming.errors import VisibilityTimeoutError, is_transient

ATTEMPT_S = 5.0


def wait_until_visible(admin: Any, last_written: Mapping[tuple[str, int], int], timeout_s: float) -> float:
    """Block until LSO > last written offset for every (topic, partition); return the seconds waited."""
    started = time.monotonic()
    deadline = started + timeout_s
    pending = dict(last_written)
    stable: dict[tuple[str, int], int] = {}
    while pending:
        attempt_s = max(0.5, min(ATTEMPT_S, deadline - time.monotonic()))
        req = {TopicPartition(t, p): OffsetSpec.latest() for t, p in pending}
        futures = admin.list_offsets(req, isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=attempt_s)
        for tp, fut in futures.items():
            key = (tp.topic, tp.partition)
            try:
                stable[key] = int(fut.result(timeout=attempt_s + 1.0).offset)
            except FutureTimeoutError:
                continue
            except KafkaException as exc:
                err = exc.args[0] if exc.args else None
                if err is None or not is_transient(err):
                    raise
                continue
            if stable[key] > pending[key]:
                del pending[key]
        if not pending:
            break
        if time.monotonic() > deadline:
            behind = "; ".join(
                f"{t}[{p}] last stable offset {stable.get((t, p), '?')}, written up to {last}"
                for (t, p), last in sorted(pending.items())
            )
            raise VisibilityTimeoutError(
                f"committed records not visible to read_committed readers after {timeout_s:g}s: {behind} "
                "(another producer's open transaction on these partitions holds the last stable offset back; "
                "the records are committed and become visible when it ends)"
            )
        time.sleep(0.05)
    return time.monotonic() - started
