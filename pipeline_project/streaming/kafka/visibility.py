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
ListOffsets round is capped at `offsets.ATTEMPT_S` and retried until the deadline.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka import IsolationLevel
from confluent_kafka.admin import OffsetSpec

from pipeline_project.streaming.errors import VisibilityTimeoutError
from pipeline_project.streaming.kafka.offsets import attempt_budget, one_attempt


def wait_until_visible(admin: Any, last_written: Mapping[tuple[str, int], int], timeout_s: float) -> float:
    """Block until LSO > last written offset for every (topic, partition); return the seconds waited."""
    started = time.monotonic()
    deadline = started + timeout_s
    pending = dict(last_written)
    stable: dict[tuple[str, int], int] = {}
    rounds = 0
    while pending:
        got, _ = one_attempt(
            admin, list(pending), OffsetSpec.latest(), IsolationLevel.READ_COMMITTED, attempt_budget(deadline)
        )
        stable.update(got)
        for key, offset in got.items():
            if offset > pending[key]:
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
        time.sleep(min(0.05, 0.01 * 2**rounds))  # markers usually land within tens of ms of the commit
        rounds += 1
    return time.monotonic() - started
