"""The attempt lifecycle of the PostgreSQL dedup index: the SQL that makes a batch's rows visible or removes them.

An attempt is one try at publishing one batch. Its rows are inserted `pending`; lookups ignore them until the
attempt is `published`. `publish_rows` makes an attempt visible and retires the batch's earlier publication in
one transaction; `remove_attempt` deletes a dead attempt's rows (the cascade takes its keys and handovers).
"""

from __future__ import annotations

import hashlib

SCHEMA_VERSION = 2
SCHEMA = """
CREATE TABLE IF NOT EXISTS dedup_meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS dedup_attempts (
    attempt TEXT PRIMARY KEY,
    batch_id TEXT NOT NULL,
    state TEXT NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'published')),
    by_manifest BOOLEAN NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS dedup_docs (
    id BIGSERIAL PRIMARY KEY,
    attempt TEXT NOT NULL REFERENCES dedup_attempts (attempt) ON DELETE CASCADE,
    batch_id TEXT NOT NULL,
    doc_id TEXT NOT NULL,
    exact_key BIGINT,
    signature BYTEA,
    UNIQUE (attempt, doc_id)
);
CREATE TABLE IF NOT EXISTS dedup_exact (
    key BIGINT PRIMARY KEY,
    doc BIGINT NOT NULL REFERENCES dedup_docs (id) ON DELETE CASCADE
);
CREATE TABLE IF NOT EXISTS dedup_bands (
    key BIGINT PRIMARY KEY,
    doc BIGINT NOT NULL REFERENCES dedup_docs (id) ON DELETE CASCADE
);
CREATE TABLE IF NOT EXISTS dedup_handover (
    attempt TEXT NOT NULL REFERENCES dedup_attempts (attempt) ON DELETE CASCADE,
    kind TEXT NOT NULL,
    key BIGINT NOT NULL,
    doc BIGINT NOT NULL REFERENCES dedup_docs (id) ON DELETE CASCADE
);
CREATE INDEX IF NOT EXISTS dedup_exact_doc ON dedup_exact (doc);
CREATE INDEX IF NOT EXISTS dedup_bands_doc ON dedup_bands (doc);
CREATE INDEX IF NOT EXISTS dedup_docs_batch ON dedup_docs (batch_id);
CREATE INDEX IF NOT EXISTS dedup_handover_attempt ON dedup_handover (attempt);
CREATE INDEX IF NOT EXISTS dedup_handover_doc ON dedup_handover (doc);
CREATE INDEX IF NOT EXISTS dedup_attempts_pending ON dedup_attempts (state) WHERE state = 'pending';
"""

# version 1 had no attempts: every row was visible. Each batch becomes one published attempt.
MIGRATE_FROM_1 = """
INSERT INTO dedup_attempts (attempt, batch_id, state, by_manifest)
    SELECT DISTINCT 'v1:' || batch_id, batch_id, 'published', false FROM dedup_docs;
ALTER TABLE dedup_docs ADD COLUMN IF NOT EXISTS attempt TEXT;
UPDATE dedup_docs SET attempt = 'v1:' || batch_id;
ALTER TABLE dedup_docs ALTER COLUMN attempt SET NOT NULL,
    ADD FOREIGN KEY (attempt) REFERENCES dedup_attempts (attempt) ON DELETE CASCADE,
    DROP CONSTRAINT IF EXISTS dedup_docs_batch_id_doc_id_key,
    ADD UNIQUE (attempt, doc_id);
UPDATE dedup_meta SET value = '2' WHERE name = 'schema_version';
"""

# what a lookup may find: rows of published attempts of other batches
VISIBLE = "JOIN dedup_attempts a ON a.attempt = d.attempt AND a.state = 'published'"


class AttemptLostError(Exception):
    """The attempt's rows are gone: another process judged it dead (its PostgreSQL session had ended)."""


def lock_key(attempt: str) -> int:
    """The advisory lock an attempt's session holds while the attempt is alive (a signed 64-bit number)."""
    return int.from_bytes(hashlib.sha256(f"dedup-attempt:{attempt}".encode()).digest()[:8], "big", signed=True)


def publish_rows(cur, attempt: str) -> bool:
    """Make `attempt` visible and retire the batch's earlier publication (keys it shares pass to `attempt`).

    Returns False when the attempt's rows are gone. Publishing an attempt that is already published is a no-op.
    """
    cur.execute("SELECT batch_id, state FROM dedup_attempts WHERE attempt = %s FOR UPDATE", (attempt,))
    row = cur.fetchone()
    if row is None:
        return False
    batch_id, state = row
    if state == "published":
        return True
    cur.execute("UPDATE dedup_attempts SET state = 'published' WHERE attempt = %s", (attempt,))
    for table, kind in (("dedup_exact", "exact"), ("dedup_bands", "bands")):
        cur.execute(
            f"INSERT INTO {table} (key, doc) SELECT DISTINCT ON (key) key, doc FROM dedup_handover "
            "WHERE attempt = %s AND kind = %s ORDER BY key, doc "
            f"ON CONFLICT (key) DO UPDATE SET doc = EXCLUDED.doc WHERE {table}.doc IN "
            "(SELECT id FROM dedup_docs WHERE batch_id = %s AND attempt <> %s)",
            (attempt, kind, batch_id, attempt),
        )
    cur.execute("DELETE FROM dedup_handover WHERE attempt = %s", (attempt,))
    cur.execute(
        "DELETE FROM dedup_attempts WHERE batch_id = %s AND attempt <> %s AND state = 'published'", (batch_id, attempt)
    )
    return True


def remove_attempt(cur, attempt: str) -> None:
    """Delete a pending attempt and, by cascade, its documents, keys and handovers."""
    cur.execute("DELETE FROM dedup_attempts WHERE attempt = %s AND state = 'pending'", (attempt,))
