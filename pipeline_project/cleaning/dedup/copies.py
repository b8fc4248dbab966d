"""Duplicate-cluster counts (issue 31 item 4): how many copies of each kept document the dedup has seen.

Every duplicate a batch drops (exact or near, in the batch or against an earlier batch's document) is a copy of
a kept document, named "<batch>/<doc>" as in its drop reason. A batch records its copies in `dedup_copies` under
its dedup attempt, inside the pending-attempt protocol of `dedup_store`: the rows cascade away with an attempt
that is abandoned or judged dead, and with a batch's earlier publication when a re-run is published. So a count
is the sum over published attempts, and never includes an attempt that did not make it. A document's count
grows as later batches publish copies of it; the attribute written at cleaning time is the count so far.
"""

from __future__ import annotations

import hashlib
import uuid
import weakref
from collections import Counter
from collections.abc import Iterable

from pipeline_project.cleaning.dedup.attempts import AttemptLostError
from pipeline_project.cleaning.dedup.index import DedupIndex
from pipeline_project.cleaning.output.attributes import duplicate_of

SCHEMA = """
CREATE TABLE IF NOT EXISTS dedup_copies (
    target UUID NOT NULL,
    attempt INTEGER NOT NULL REFERENCES dedup_attempts (num) ON DELETE CASCADE,
    near BOOLEAN NOT NULL,
    n INTEGER NOT NULL,
    PRIMARY KEY (target, attempt, near)
);
CREATE INDEX IF NOT EXISTS dedup_copies_attempt ON dedup_copies (attempt);
"""


def target_key(target: str) -> str:
    """The stored key of a target "<batch>/<doc>": its md5 as a UUID (16 bytes; no two of 10^10 targets share one)."""
    return str(uuid.UUID(hashlib.md5(target.encode("utf-8")).hexdigest()))


_READY: weakref.WeakSet = weakref.WeakSet()  # the indexes whose database holds the table


def _ensure(index, cur) -> None:
    if index not in _READY:
        cur.execute("SELECT pg_advisory_xact_lock(hashtext('pipeline_project.dedup_schema'))")
        cur.execute(SCHEMA)
        _READY.add(index)


def record(index, attempt: str, copies: Counter) -> None:
    """Record the batch's copies {(target, kind): n} under its (pending) attempt; recording again replaces."""
    from psycopg2.extras import execute_values

    with index.cursor() as cur:
        _ensure(index, cur)
        cur.execute("SELECT num FROM dedup_attempts WHERE attempt = %s", (attempt,))
        row = cur.fetchone()
        if row is None:
            raise AttemptLostError(f"dedup index: attempt {attempt} is gone (judged dead); not recording its copies")
        cur.execute("DELETE FROM dedup_copies WHERE attempt = %s", row)
        summed: Counter = Counter()
        for (target, kind), n in copies.items():
            summed[(target_key(target), kind == "near")] += n
        rows = [(target, row[0], near, n) for (target, near), n in sorted(summed.items())]
        execute_values(cur, "INSERT INTO dedup_copies (target, attempt, near, n) VALUES %s", rows)


def counts(index, targets: Iterable[str], attempt: str = "", batch_id: str = "") -> dict[str, tuple[int, int]]:
    """{target: (exact copies, near copies)} over published attempts; with `attempt`, over that attempt instead
    of its batch's earlier publication (which it replaces when published)."""
    targets = list(targets)
    out = dict.fromkeys(targets, (0, 0))
    if not targets:
        return out
    name_of = {target_key(t): t for t in targets}
    with index.cursor() as cur:
        _ensure(index, cur)
        cur.execute(
            "SELECT c.target::text, c.near, sum(c.n) FROM dedup_copies c JOIN dedup_attempts a ON a.num = c.attempt "
            "WHERE c.target = ANY(%s::uuid[]) AND ((a.state = 'published' AND a.batch_id <> %s) OR a.attempt = %s) "
            "GROUP BY c.target, c.near",
            (list(name_of), batch_id, attempt),
        )
        for key, is_near, n in cur.fetchall():
            target = name_of[key]
            exact, near = out[target]
            out[target] = (exact, near + int(n)) if is_near else (exact + int(n), near)
    return out


def batch_copies(
    batch_id: str,
    copies: Counter,
    kept_ids: list[str],
    late: dict[str, str],
    index: DedupIndex | None = None,
    attempt: str = "",
) -> dict[str, tuple[int, int]]:
    """The kept documents' copy counts {doc_id: (exact, near)} after the index commit.

    `copies`: {(target, kind): n} of the batch's duplicates; `late`: {doc_id: reason} of kept documents the
    index then dropped (their copies pass to what they duplicate, and they are copies themselves). With a
    cross-batch index and an attempt, the copies are recorded there (`DedupIndex.batch_copies`)."""
    moved: Counter = Counter()
    for (target, kind), n in copies.items():
        doc = target[len(batch_id) + 1 :] if target.startswith(batch_id + "/") else None
        dup = duplicate_of(late[doc]) if doc in late else None
        moved[(dup[0] if dup else target, kind)] += n
    for reason in late.values():
        dup = duplicate_of(reason)
        if dup:
            moved[dup] += 1
    kept = [d for d in kept_ids if d not in late]
    if index is not None and attempt:
        return index.batch_copies(batch_id, attempt, moved, kept)
    return {d: (moved[(f"{batch_id}/{d}", "exact")], moved[(f"{batch_id}/{d}", "near")]) for d in kept}
