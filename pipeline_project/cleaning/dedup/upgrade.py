"""Bringing a PostgreSQL dedup index of an earlier schema version up to `schema.SCHEMA_VERSION`, in place.

Called by `PostgresDedupIndex` on connect, under the schema lock and in one transaction (all or nothing):

* 1 -> 2: each batch becomes one published attempt (`schema.MIGRATE_FROM_1`).
* 2 -> 3: version 2's row per key (`dedup_exact`, `dedup_bands`, both pointing at `dedup_docs`) becomes one
  `dedup_kept` row per document with its keys in columns. Version 2 did not record a band key's band number;
  it is found again by hashing the document's stored signature as the MinHash step does (xxh3 of the band's
  rows, seeded with the band number). A band key that matches none of its document's bands cannot be placed
  and the upgrade stops (nothing is changed): an index built with other band hashing is rebuilt, not guessed.
  Pending attempts stay pending with their handovers; copy counts keep their sums, their targets hashed.
"""

from __future__ import annotations

import io

import numpy as np
import xxhash

from pipeline_project.cleaning.dedup import schema
from pipeline_project.cleaning.dedup.traffic import copy_text
from pipeline_project.cleaning.errors import CleaningError

_CHUNK = 50_000


def upgrade(cur, version: str | None) -> None:
    """Bring the schema of stored `version` (None: a new index) up to version 3, in the caller's transaction."""
    if version == "1":
        cur.execute(schema.SCHEMA_V2)
        cur.execute(schema.MIGRATE_FROM_1)
        version = "2"
    if version == "2":
        _from_2(cur)


def band_numbers(signature: bytes | None, num_perm: int, num_bands: int) -> dict[int, int]:
    """{band key (signed, as stored): band number} of a stored signature, as the MinHash step hashes its bands."""
    if not signature:
        return {}
    rows = np.frombuffer(signature, dtype=np.uint32).reshape(num_bands, num_perm // num_bands)
    keys = np.array([xxhash.xxh3_64_intdigest(r.tobytes(), seed=b) or 1 for b, r in enumerate(rows)], np.uint64)
    return {k: b for b, k in enumerate(keys.view(np.int64).tolist())}


def _from_2(cur) -> None:
    from pipeline_project.cleaning.dedup import copies

    cur.execute("SELECT name, value FROM dedup_meta")
    meta = dict(cur.fetchall())
    num_perm, num_bands = int(meta["num_perm"]), int(meta["num_bands"])
    cur.execute(schema.MIGRATE_FROM_2_BEFORE)
    cur.execute(schema.schema(num_bands))
    cols = schema.key_columns(num_bands)
    source = cur.connection.cursor(name="dedup_upgrade_v2")
    source.execute(
        "SELECT d.id, a.num, d.doc_id, d.signature, e.key, "
        "ARRAY(SELECT b.key FROM dedup_bands b WHERE b.doc = d.id), "
        "ARRAY(SELECT h.kind || ' ' || h.key FROM dedup_handover_v2 h WHERE h.doc = d.id) "
        "FROM dedup_docs d JOIN dedup_attempts a ON a.attempt = d.attempt LEFT JOIN dedup_exact e ON e.doc = d.id "
        "ORDER BY d.id"
    )
    while rows := source.fetchmany(_CHUNK):
        kept, handover = [], []
        for doc, num, doc_id, sig, exact, bands, handed in rows:
            sig = bytes(sig) if sig is not None else None
            where = band_numbers(sig, num_perm, num_bands)
            keys: list[int | None] = [exact, *([None] * num_bands)]
            for key in bands:
                keys[1 + _place(where, key, doc_id)] = key
            for entry in handed:
                kind, key = entry.split(" ")
                col = 0 if kind == "exact" else 1 + _place(where, int(key), doc_id)
                handover.append(f"{num}\t{col}\t{key}\t{doc}\n")
            fields = [str(doc), *("\\N" if k is None else str(k) for k in keys), str(num), copy_text(doc_id)]
            kept.append("\t".join([*fields, f"\\\\x{sig.hex()}" if sig is not None else "\\N"]) + "\n")
        cur.copy_expert(
            f"COPY dedup_kept (id, {', '.join(cols)}, attempt, doc_id, signature) FROM STDIN",
            io.StringIO("".join(kept)),
        )
        if handover:
            cur.copy_expert("COPY dedup_handover (attempt, col, key, doc) FROM STDIN", io.StringIO("".join(handover)))
    source.close()
    cur.execute(
        "SELECT setval(pg_get_serial_sequence('dedup_kept', 'id'), coalesce(max(id), 0) + 1, false) FROM dedup_kept"
    )
    cur.execute("SELECT to_regclass('dedup_copies_v2') IS NOT NULL")
    if cur.fetchone()[0]:
        cur.execute(copies.SCHEMA)
        cur.execute(
            "INSERT INTO dedup_copies (target, attempt, near, n) SELECT md5(c.target)::uuid, a.num, c.kind = 'near', "
            "sum(c.n) FROM dedup_copies_v2 c JOIN dedup_attempts a ON a.attempt = c.attempt GROUP BY 1, 2, 3"
        )
        cur.execute("DROP TABLE dedup_copies_v2")
    cur.execute("DROP TABLE dedup_handover_v2, dedup_exact, dedup_bands, dedup_docs")
    cur.execute("UPDATE dedup_meta SET value = %s WHERE name = 'schema_version'", (str(schema.SCHEMA_VERSION),))


def _place(where: dict[int, int], key: int, doc_id: str) -> int:
    band = where.get(key)
    if band is None:
        raise CleaningError(
            f"dedup index upgrade 2 -> 3: band key {key} of document {doc_id} matches none of its signature's bands "
            "(an index built with other band hashing); rebuild the index instead of upgrading it"
        )
    return band


def ensure_tables(conn, name: str, num_perm: int, num_bands: int) -> None:
    """Create the index's tables in schema `name` (the session's search_path), or upgrade them, unless the stored
    version says they are there: DDL takes table locks that deadlock with another writer's open transaction (seen
    on a reconnect during a host cut). Refuses an index of another shape."""
    with conn, conn.cursor() as cur:
        cur.execute("SELECT to_regclass('dedup_meta') IS NOT NULL")
        meta = {}
        if cur.fetchone()[0]:
            cur.execute("SELECT name, value FROM dedup_meta")
            meta = dict(cur.fetchall())
    if meta.get("schema_version") != str(schema.SCHEMA_VERSION) or not {"num_perm", "num_bands"} <= set(meta):
        with conn, conn.cursor() as cur:
            cur.execute("SELECT pg_advisory_xact_lock(hashtext('pipeline_project.dedup_schema'))")
            cur.execute(f"CREATE SCHEMA IF NOT EXISTS {name}")
            cur.execute("CREATE TABLE IF NOT EXISTS dedup_meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)")
            cur.execute("SELECT value FROM dedup_meta WHERE name = 'schema_version'")
            row = cur.fetchone()
            upgrade(cur, row[0] if row is not None else None)
            cur.execute("SELECT value FROM dedup_meta WHERE name = 'num_bands'")  # the stored shape's columns
            cur.execute(schema.schema(int((cur.fetchone() or [num_bands])[0])))
            cur.execute(
                "INSERT INTO dedup_meta (name, value) VALUES ('schema_version', %s), ('num_perm', %s), "
                "('num_bands', %s) ON CONFLICT (name) DO NOTHING",
                (str(schema.SCHEMA_VERSION), str(num_perm), str(num_bands)),
            )
            cur.execute("SELECT name, value FROM dedup_meta")
            meta = dict(cur.fetchall())
    stored = (int(meta["schema_version"]), int(meta["num_perm"]), int(meta["num_bands"]))
    if stored != (schema.SCHEMA_VERSION, num_perm, num_bands):
        raise CleaningError(
            f"dedup index schema/shape {stored} differs from this configuration "
            f"{(schema.SCHEMA_VERSION, num_perm, num_bands)}: use another database or migrate"
        )
