"""The tables of the PostgreSQL dedup index (version 3), and the way up from versions 1 and 2.

Version 3 stores what first-writer-wins needs and little else, one row per kept document:

    dedup_attempts  one row per try at publishing a batch: (attempt, num, batch_id, state pending|published)
    dedup_kept      one row per kept document: (id, exact, band0..band{n-1}, attempt num, doc_id, signature).
                    Each key column has a UNIQUE index: one owner per exact hash and per MinHash band key (a band
                    key is seeded with its band number, so a band's column is its namespace). A key another
                    document owns is NULL in the later document's row, so a row's keys leave with the row.
    dedup_handover  keys a re-run takes over from its batch's earlier publication when it is published
    dedup_copies    (`copies.py`) duplicate-cluster counts per attempt, the target as md5("<batch>/<doc>")

Why one row per document rather than version 2's row per key (`dedup_exact`, `dedup_bands`): a PostgreSQL row
costs 28 bytes of header and line pointer before its data, and version 2 paid it 15 times per document, plus an
index on the owning document for the cascade. What a document needs beside its keys: its id (the name a drop
reason gives) and its signature (the near-duplicate estimate); its batch is its attempt's.

Writers of keys (`reserve.reserve_once`, `attempts.publish_rows`) hold `KEYS_LOCK` for their transaction: with
fifteen unique keys per row no order of inserts avoids deadlocks between two writers, so they take turns (a
reserve of a few thousand documents holds it for well under a second; lookups and deletes do not take it).
"""

from __future__ import annotations

SCHEMA_VERSION = 3
KEYS_LOCK = 0x64656475_7033  # pg_advisory_xact_lock key of the writers of keys ("dedup" "p3")


def key_columns(num_bands: int) -> list[str]:
    """The key columns of `dedup_kept`, in the order reserve and lookups use: exact, then band 0..n-1."""
    return ["exact", *(f"band{b}" for b in range(num_bands))]


def schema(num_bands: int) -> str:
    """The DDL of version 3 (idempotent)."""
    keys = key_columns(num_bands)
    columns = ",\n    ".join(f"{c} BIGINT" for c in keys)
    unique = "\n".join(f"CREATE UNIQUE INDEX IF NOT EXISTS dedup_kept_{c} ON dedup_kept ({c});" for c in keys)
    return f"""
CREATE TABLE IF NOT EXISTS dedup_meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS dedup_attempts (
    attempt TEXT PRIMARY KEY,
    num INTEGER GENERATED ALWAYS AS IDENTITY UNIQUE,
    batch_id TEXT NOT NULL,
    state TEXT NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'published')),
    by_manifest BOOLEAN NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS dedup_kept (
    id BIGSERIAL PRIMARY KEY,
    {columns},
    attempt INTEGER NOT NULL REFERENCES dedup_attempts (num) ON DELETE CASCADE,
    doc_id TEXT NOT NULL,
    signature BYTEA
);
{unique}
CREATE INDEX IF NOT EXISTS dedup_kept_attempt ON dedup_kept (attempt);
CREATE TABLE IF NOT EXISTS dedup_handover (
    attempt INTEGER NOT NULL REFERENCES dedup_attempts (num) ON DELETE CASCADE,
    col SMALLINT NOT NULL,
    key BIGINT NOT NULL,
    doc BIGINT NOT NULL REFERENCES dedup_kept (id) ON DELETE CASCADE
);
CREATE INDEX IF NOT EXISTS dedup_handover_attempt ON dedup_handover (attempt);
CREATE INDEX IF NOT EXISTS dedup_handover_doc ON dedup_handover (doc);
CREATE INDEX IF NOT EXISTS dedup_attempts_pending ON dedup_attempts (state) WHERE state = 'pending';
"""


# version 2, as it was: the starting point of MIGRATE_FROM_1 and of `migrate_from_2`
SCHEMA_V2 = """
CREATE TABLE IF NOT EXISTS dedup_attempts (
    attempt TEXT PRIMARY KEY,
    batch_id TEXT NOT NULL,
    state TEXT NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'published')),
    by_manifest BOOLEAN NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS dedup_handover (
    attempt TEXT NOT NULL REFERENCES dedup_attempts (attempt) ON DELETE CASCADE,
    kind TEXT NOT NULL,
    key BIGINT NOT NULL,
    doc BIGINT NOT NULL REFERENCES dedup_docs (id) ON DELETE CASCADE
);
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

# version 2 -> 3, before `schema(num_bands)` creates the new tables: the old ones step aside
MIGRATE_FROM_2_BEFORE = """
ALTER TABLE dedup_attempts ADD COLUMN IF NOT EXISTS num INTEGER GENERATED ALWAYS AS IDENTITY UNIQUE;
ALTER TABLE dedup_handover RENAME TO dedup_handover_v2;
ALTER TABLE IF EXISTS dedup_copies RENAME TO dedup_copies_v2;
"""
