"""What the PostgreSQL dedup index occupies on disk: every table and index of its schema, in bytes.

`relation_sizes` reads `pg_total_relation_size` (a table with its TOAST) and `pg_relation_size` (each index
alone) for every table of the schema, so a caller divides by the kept documents to get bytes per document and
sees which relation costs what. Sizes are whole 8 KiB pages: measure a schema of thousands of documents or more.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RelationSize:
    table: str
    relation: str  # the table itself (its heap, free-space map and TOAST) or one of its indexes
    bytes: int


def relation_sizes(cur, schema: str) -> list[RelationSize]:
    """Every table of `schema` (heap + TOAST, as `relation == table`) and each of its indexes, largest first."""
    cur.execute(
        "SELECT c.relname, pg_total_relation_size(c.oid) - pg_indexes_size(c.oid) FROM pg_class c "
        "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relkind = 'r'",
        (schema,),
    )
    out = [RelationSize(t, t, int(b)) for t, b in cur.fetchall()]
    cur.execute(
        "SELECT t.relname, i.relname, pg_relation_size(i.oid) FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid "
        "JOIN pg_class t ON t.oid = x.indrelid JOIN pg_namespace n ON n.oid = t.relnamespace WHERE n.nspname = %s",
        (schema,),
    )
    out += [RelationSize(t, i, int(b)) for t, i, b in cur.fetchall()]
    return sorted(out, key=lambda r: -r.bytes)


def total_bytes(cur, schema: str) -> int:
    """`pg_total_relation_size` summed over the schema's tables (heaps, TOAST and indexes)."""
    cur.execute(
        "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
        "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relkind = 'r'",
        (schema,),
    )
    return int(cur.fetchone()[0])
