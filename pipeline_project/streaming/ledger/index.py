"""A cache of a ledger topic's records up to an offset, so a ledger read costs what was written since the last one.

The ledger (`ledger`) is a compacted Kafka topic with one record per batch, written in the batch's own
transactions; it stays the truth. Finding one key in it means reading it from the start: at 50,000 batches that
is ~90 MB and ~1.8 s, growing with every batch (`bench/ledger_read.py`). A `LedgerIndex` holds, per ledger topic
id and partition, the offset up to which it has every record, and for each key the latest record below that
offset (the offset it was written at, and its value; `None` for a tombstone). `read_ledger_records` starts
reading at that offset, looks the wanted keys up in the cache, and hands the records it read back to it.

Writes are idempotent and commute: a key's row is replaced only by a record at a higher offset, and a position
only moves up, so readers that run at once leave the cache as either would. The invariant "every record below the
position is in the cache" holds because a read covers a contiguous range from the cached position to the high
watermark, every transaction below which has ended (`ledger.read_ledger_records` waits for that). A recreated
ledger has a new topic id, so its cache starts empty. The index is a cache: when it cannot be reached, the ledger
is read from the start, with a warning.

A cache left more than the ledger's `delete.retention.ms` (24 h by default) behind can miss a tombstone that
compaction has dropped meanwhile. The ledger's tombstones retire the progress record of a batch whose
completion record is written in the same transaction (and a completion record always wins over a progress
record), or a retired entry, whose audit record `<key>#retired` is written in the same transaction and is never
tombstoned (`LedgerRecords.drop_retired` forgets the retired records it names). So such a stale record changes
no decision.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from typing import Protocol

from pipeline_project.common.postgres import SchemaConnection
from pipeline_project.streaming.errors import StreamingError

log = logging.getLogger(__name__)

# key -> (partition, offset, value or None for a tombstone)
Changes = dict[str, tuple[int, int, bytes | None]]


class LedgerIndexUnavailableError(StreamingError):
    """The ledger index's database cannot be reached or answered with an error."""


class LedgerIndex(Protocol):
    def snapshot(self, ledger_id: str, keys: Collection[str]) -> tuple[dict[int, int], dict[str, bytes | None]]:
        """Per partition the next offset not in the cache, and the cached values of `keys` (absent: never seen)."""
        ...

    def update(self, ledger_id: str, changes: Changes, positions: dict[int, int]) -> None:
        """Take the records read (latest per key) and the offsets read up to, atomically."""
        ...


_SCHEMA = """
CREATE TABLE IF NOT EXISTS ledger_records (
    ledger_id text NOT NULL,
    key text NOT NULL,
    kafka_partition integer NOT NULL,
    kafka_offset bigint NOT NULL,
    value bytea,
    PRIMARY KEY (ledger_id, key)
);
CREATE TABLE IF NOT EXISTS ledger_positions (
    ledger_id text NOT NULL,
    kafka_partition integer NOT NULL,
    next_offset bigint NOT NULL,
    PRIMARY KEY (ledger_id, kafka_partition)
);
"""


class PostgresLedgerIndex:
    """The cache in PostgreSQL (the server that holds the dedup index), in schema `schema`."""

    def __init__(self, url: str, schema: str = "kafka_ledger", connect_timeout_s: int = 10):
        self._db = SchemaConnection(
            url,
            schema,
            _SCHEMA,
            what="ledger index",
            error=LedgerIndexUnavailableError,
            connect_timeout_s=connect_timeout_s,
        )
        self.url, self.schema = url, schema

    def snapshot(self, ledger_id: str, keys: Collection[str]) -> tuple[dict[int, int], dict[str, bytes | None]]:
        with self._db.transaction() as cur:
            cur.execute("SELECT kafka_partition, next_offset FROM ledger_positions WHERE ledger_id = %s", (ledger_id,))
            positions = dict(cur.fetchall())
            cur.execute(
                "SELECT key, value FROM ledger_records WHERE ledger_id = %s AND key = ANY(%s)", (ledger_id, list(keys))
            )
            values = {k: (None if v is None else bytes(v)) for k, v in cur.fetchall()}
        return positions, values

    def update(self, ledger_id: str, changes: Changes, positions: dict[int, int]) -> None:
        from psycopg2.extras import execute_values

        # in key order, so two readers upserting overlapping keys lock them in the same order (no deadlock)
        rows = [(ledger_id, k, p, off, v) for k, (p, off, v) in sorted(changes.items())]
        with self._db.transaction() as cur:
            if rows:
                execute_values(
                    cur,
                    "INSERT INTO ledger_records (ledger_id, key, kafka_partition, kafka_offset, value) VALUES %s "
                    "ON CONFLICT (ledger_id, key) DO UPDATE SET kafka_partition = EXCLUDED.kafka_partition, "
                    "kafka_offset = EXCLUDED.kafka_offset, value = EXCLUDED.value "
                    "WHERE (ledger_records.kafka_partition, ledger_records.kafka_offset) "
                    "< (EXCLUDED.kafka_partition, EXCLUDED.kafka_offset)",
                    rows,
                    page_size=1000,
                )
            execute_values(
                cur,
                "INSERT INTO ledger_positions (ledger_id, kafka_partition, next_offset) VALUES %s "
                "ON CONFLICT (ledger_id, kafka_partition) DO UPDATE "
                "SET next_offset = GREATEST(ledger_positions.next_offset, EXCLUDED.next_offset)",
                [(ledger_id, p, off) for p, off in positions.items()],
            )

    def close(self) -> None:
        self._db.close()
