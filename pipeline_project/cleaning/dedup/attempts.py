"""The attempt lifecycle of the PostgreSQL dedup index: the SQL that makes a batch's rows visible or removes them.

An attempt is one try at publishing one batch. Its rows are inserted `pending`; lookups ignore them until the
attempt is `published`. `publish_rows` makes an attempt visible and retires the batch's earlier publication in
one transaction; `remove_attempt` deletes a dead attempt's rows (its documents' keys are in their rows; the
cascade takes its handovers and copies). The tables: `schema.py`.
"""

from __future__ import annotations

import hashlib

from pipeline_project.cleaning.dedup import schema

SCHEMA_VERSION = schema.SCHEMA_VERSION

# what a lookup may find: rows of published attempts of other batches
VISIBLE = "JOIN dedup_attempts a ON a.num = d.attempt AND a.state = 'published'"


class AttemptLostError(Exception):
    """The attempt's rows are gone: another process judged it dead (its PostgreSQL session had ended)."""


def lock_key(attempt: str) -> int:
    """The advisory lock an attempt's session holds while the attempt is alive (a signed 64-bit number)."""
    return int.from_bytes(hashlib.sha256(f"dedup-attempt:{attempt}".encode()).digest()[:8], "big", signed=True)


def publish_rows(cur, attempt: str) -> bool:
    """Make `attempt` visible and retire the batch's earlier publication (keys it shares pass to `attempt`).

    Returns False when the attempt's rows are gone. Publishing an attempt that is already published is a no-op.
    The earlier publication's rows go first, so the keys handed over are free; a key meanwhile taken by another
    batch's document (the earlier owner was gone before) stays that document's.
    """
    cur.execute("SELECT pg_advisory_xact_lock(%s)", (schema.KEYS_LOCK,))
    cur.execute("SELECT num, batch_id, state FROM dedup_attempts WHERE attempt = %s FOR UPDATE", (attempt,))
    row = cur.fetchone()
    if row is None:
        return False
    num, batch_id, state = row
    if state == "published":
        return True
    cur.execute("UPDATE dedup_attempts SET state = 'published' WHERE num = %s", (num,))
    cur.execute("DELETE FROM dedup_attempts WHERE batch_id = %s AND num <> %s AND state = 'published'", (batch_id, num))
    columns = schema.key_columns(_num_bands(cur))
    cur.execute("SELECT DISTINCT col FROM dedup_handover WHERE attempt = %s", (num,))
    for (col,) in cur.fetchall():
        c = columns[col]
        cur.execute(
            f"UPDATE dedup_kept d SET {c} = h.key FROM dedup_handover h WHERE h.attempt = %s AND h.col = %s "
            f"AND d.id = h.doc AND NOT EXISTS (SELECT 1 FROM dedup_kept o WHERE o.{c} = h.key)",
            (num, col),
        )
    cur.execute("DELETE FROM dedup_handover WHERE attempt = %s", (num,))
    return True


def _num_bands(cur) -> int:
    cur.execute("SELECT value FROM dedup_meta WHERE name = 'num_bands'")
    return int(cur.fetchone()[0])


def remove_attempt(cur, attempt: str) -> None:
    """Delete a pending attempt and, by cascade, its documents (their keys with them), handovers and copies."""
    cur.execute("DELETE FROM dedup_attempts WHERE attempt = %s AND state = 'pending'", (attempt,))


def forget_rows(cur, attempt: str, doc_ids: list[str]) -> int:
    """Delete the named documents of `attempt` (their keys and handovers with them); returns how many."""
    cur.execute(
        "DELETE FROM dedup_kept d USING dedup_attempts a WHERE a.num = d.attempt AND a.attempt = %s "
        "AND d.doc_id = ANY(%s)",
        (attempt, doc_ids),
    )
    return cur.rowcount
