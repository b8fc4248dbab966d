"""Where a backlog count keeps the batches not yet wholly trained: rows in a database, aggregated there, so what a
count carries between calls (a sensor cursor, a key in the instance's store) is a scope name and a few numbers,
whatever the number of untrained batches.

One scope per counter (the checkpoint trigger's cursor names one, training's state another): a header row (the
newest `token_blocks` materialization taken, and the checkpoint head the rows were judged against) and one row per
batch (its newest materialization's storage id, tokens, topic, offset ranges, and its untrained share under that
head). A batch whose share falls to 0 is deleted. When the head moves forward only the batches with an offset below
the new position (or, without ranges, a storage id at or below the checkpoint's) can change, and an index finds
them; the totals are one aggregate query. Writes are idempotent (a batch's row is replaced only by a newer
materialization), so a count that dies between a write and its caller's cursor is redone without harm.

`PostgresBacklogStore` keeps them in the deployment's PostgreSQL (the ledger index's and dedup index's server,
schema `pipeline_backlog`); `SqliteBacklogStore` is its stand-in, a file beside an instance with no such server
(`dagster dev` on SQLite, the tests). Plain SQL, no Dagster.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from pipeline_project.common.postgres import SchemaConnection

SCHEMA = "pipeline_backlog"
STALE_S = 30 * 86400  # a scope no count touched for this long is dropped (a reset cursor, a one-off count)

_DDL = """
CREATE TABLE IF NOT EXISTS backlog_scopes (
    scope text PRIMARY KEY,
    after_id bigint NOT NULL,
    head text NOT NULL,
    touched double precision NOT NULL
);
CREATE TABLE IF NOT EXISTS backlog_batches (
    scope text NOT NULL,
    batch text NOT NULL,
    storage_id bigint NOT NULL,
    tokens bigint NOT NULL,
    share double precision NOT NULL,
    topic text,
    ranges text,
    low_offset bigint,
    PRIMARY KEY (scope, batch)
);
CREATE INDEX IF NOT EXISTS backlog_batches_low ON backlog_batches (scope, low_offset);
CREATE INDEX IF NOT EXISTS backlog_batches_sid ON backlog_batches (scope, storage_id);
"""

_COLUMNS = "batch, storage_id, tokens, share, topic, ranges"


class BacklogStoreUnavailableError(RuntimeError):
    """The backlog's database cannot be reached or answered with an error."""


@dataclass(frozen=True)
class Head:
    """The checkpoint a count judges against: its materialization's storage id, its data position (per Kafka
    partition {"offset", ...}; None: none recorded), its topic (None: not recorded) and `key`, what names it apart
    from the materialization (a rewound lineage's latest.json: "" when the materialization is the head)."""

    checkpoint_id: int = 0
    position: dict | None = None
    topic: str | None = None
    key: str = ""

    def to_json(self) -> str:
        return json.dumps([self.checkpoint_id, self.position, self.topic, self.key], sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Head:
        checkpoint_id, position, topic, key = json.loads(text)
        return cls(int(checkpoint_id), position, topic, key)

    def follows(self, earlier: Head) -> bool:
        """May rows judged under `earlier` stand under this head? Positions only move forward within a topic; a
        head behind it (another lineage, a reset, a rewind) or of another topic judges every batch anew."""
        if self.checkpoint_id < earlier.checkpoint_id or self.topic != earlier.topic:
            return False
        if earlier.position is None:
            return True
        if self.position is None:
            return False
        return all(offset_of(self.position, p) >= offset_of(earlier.position, p) for p in earlier.position)

    def judges(self, topic: str | None) -> bool:
        """Does this head say anything about a batch of `topic`? A position is a position in its own topic."""
        return not (self.topic and topic and topic != self.topic)


def offset_of(position: dict, partition: str) -> int:
    return int((position.get(str(partition)) or {}).get("offset", 0))


@dataclass(frozen=True)
class Row:
    batch: str
    storage_id: int
    tokens: int
    share: float  # untrained share under the scope's head (1.0, unjudged, for a batch of another topic)
    topic: str | None
    ranges: dict | None

    def values(self, scope: str) -> tuple:
        ranges = None if self.ranges is None else json.dumps(self.ranges, separators=(",", ":"), sort_keys=True)
        low = None if self.ranges is None else min((int(r[0]) for r in self.ranges.values()), default=-1)
        return (scope, self.batch, self.storage_id, self.tokens, self.share, self.topic, ranges, low)


def _row(values: Sequence) -> Row:
    batch, storage_id, tokens, share, topic, ranges = values
    return Row(batch, int(storage_id), int(tokens), float(share), topic, None if ranges is None else json.loads(ranges))


class BacklogStore:
    """The scopes' rows over a database connection (`_db.transaction()` yields a cursor taking `%s` parameters)."""

    def __init__(self, db) -> None:
        self._db = db

    @staticmethod
    def new_scope() -> str:
        return uuid.uuid4().hex[:16]

    def header(self, scope: str) -> tuple[int, Head] | None:
        """(after: the newest materialization taken, the head the rows were judged against); None: no such scope."""
        with self._db.transaction() as cur:
            cur.execute("SELECT after_id, head FROM backlog_scopes WHERE scope = %s", (scope,))
            found = cur.fetchone()
        return None if found is None else (int(found[0]), Head.from_json(found[1]))

    def reset(self, scope: str, head: Head) -> None:
        """Start `scope` over under `head`: no rows, nothing taken; and drop the scopes left untouched."""
        with self._db.transaction() as cur:
            cur.execute("DELETE FROM backlog_batches WHERE scope = %s", (scope,))
            self._set_header(cur, scope, 0, head)
            cur.execute("SELECT scope FROM backlog_scopes WHERE touched < %s", (time.time() - STALE_S,))
            for (stale,) in cur.fetchall():
                cur.execute("DELETE FROM backlog_batches WHERE scope = %s", (stale,))
                cur.execute("DELETE FROM backlog_scopes WHERE scope = %s", (stale,))

    def put(self, scope: str, rows: Sequence[Row], after: int) -> None:
        """Take batches' newest materializations (a row with share 0: the batch is trained) and move `after`, in
        one transaction. A batch's row is replaced or deleted only by a newer materialization."""
        keep = [r.values(scope) for r in rows if r.share > 0]
        with self._db.transaction() as cur:
            for row in rows:
                if row.share <= 0:
                    cur.execute(
                        "DELETE FROM backlog_batches WHERE scope = %s AND batch = %s AND storage_id < %s",
                        (scope, row.batch, row.storage_id),
                    )
            if keep:
                self._db.insert_many(
                    cur,
                    "INSERT INTO backlog_batches (scope, batch, storage_id, tokens, share, topic, ranges, low_offset) "
                    "VALUES %s ON CONFLICT (scope, batch) DO UPDATE SET storage_id = excluded.storage_id, "
                    "tokens = excluded.tokens, share = excluded.share, topic = excluded.topic, "
                    "ranges = excluded.ranges, low_offset = excluded.low_offset "
                    "WHERE backlog_batches.storage_id < excluded.storage_id",
                    keep,
                )
            cur.execute(
                "UPDATE backlog_scopes SET after_id = %s, touched = %s WHERE scope = %s", (after, time.time(), scope)
            )

    def candidates(self, scope: str, head: Head) -> list[Row]:
        """The rows whose share may differ under `head` from the share they hold (judged under an earlier head that
        `head` follows): an offset below its position, or (judged by storage id) at or below its checkpoint."""
        where = "storage_id <= %s"
        args: list = [scope, head.checkpoint_id]
        if head.position is not None:
            highest = max((offset_of(head.position, p) for p in head.position), default=0)
            where = f"low_offset < %s OR (ranges IS NULL AND {where})"
            args.insert(1, highest)
        with self._db.transaction() as cur:
            cur.execute(f"SELECT {_COLUMNS} FROM backlog_batches WHERE scope = %s AND ({where})", tuple(args))
            rows = [_row(r) for r in cur.fetchall()]
        return [r for r in rows if head.judges(r.topic)]

    def judge(self, scope: str, shares: dict[str, float], head: Head) -> None:
        """Set the batches' shares under `head` (0: delete the row) and make `head` the scope's, in one transaction."""
        with self._db.transaction() as cur:
            for batch, share in sorted(shares.items()):
                if share <= 0:
                    cur.execute("DELETE FROM backlog_batches WHERE scope = %s AND batch = %s", (scope, batch))
                else:
                    cur.execute(
                        "UPDATE backlog_batches SET share = %s WHERE scope = %s AND batch = %s", (share, scope, batch)
                    )
            cur.execute(
                "UPDATE backlog_scopes SET head = %s, touched = %s WHERE scope = %s",
                (head.to_json(), time.time(), scope),
            )

    def totals(self, scope: str, head: Head, after_id: int = 0) -> tuple[float, int]:
        """(untrained tokens, batches with any) of the batches `head` judges, materialized after `after_id`."""
        where, args = _judged(head)
        with self._db.transaction() as cur:
            cur.execute(
                "SELECT COALESCE(SUM(tokens * share), 0), COUNT(*) FROM backlog_batches "
                f"WHERE scope = %s AND tokens > 0 AND storage_id > %s{where}",
                (scope, after_id, *args),
            )
            tokens, count = cur.fetchone()
        return float(tokens), int(count)

    def batches(self, scope: str, topic: str) -> dict[str, dict]:
        """Batch -> offset ranges of the rows of `topic` or of no recorded topic, by batch name."""
        with self._db.transaction() as cur:
            cur.execute(
                "SELECT batch, ranges FROM backlog_batches WHERE scope = %s AND (topic IS NULL OR topic = %s) "
                "ORDER BY batch",
                (scope, topic),
            )
            return {batch: (json.loads(ranges) if ranges else {}) for batch, ranges in cur.fetchall()}

    def size(self, scope: str) -> int:
        with self._db.transaction() as cur:
            cur.execute("SELECT COUNT(*) FROM backlog_batches WHERE scope = %s", (scope,))
            return int(cur.fetchone()[0])

    def drop(self, scope: str) -> None:
        with self._db.transaction() as cur:
            cur.execute("DELETE FROM backlog_batches WHERE scope = %s", (scope,))
            cur.execute("DELETE FROM backlog_scopes WHERE scope = %s", (scope,))

    def close(self) -> None:
        self._db.close()

    @staticmethod
    def _set_header(cur, scope: str, after: int, head: Head) -> None:
        cur.execute("DELETE FROM backlog_scopes WHERE scope = %s", (scope,))
        cur.execute(
            "INSERT INTO backlog_scopes (scope, after_id, head, touched) VALUES (%s, %s, %s, %s)",
            (scope, after, head.to_json(), time.time()),
        )


def _judged(head: Head) -> tuple[str, tuple]:
    """The SQL condition (and its parameters) of the rows `head` judges (`Head.judges`)."""
    if not head.topic:
        return "", ()
    return " AND (topic IS NULL OR topic = %s)", (head.topic,)


class _Postgres(SchemaConnection):
    def insert_many(self, cur, sql: str, rows: list[tuple]) -> None:
        from psycopg2.extras import execute_values

        execute_values(cur, sql, sorted(rows), page_size=1000)  # in key order: no deadlock between writers


class PostgresBacklogStore(BacklogStore):
    def __init__(self, url: str, schema: str = SCHEMA, connect_timeout_s: int = 10) -> None:
        super().__init__(
            _Postgres(
                url,
                schema,
                _DDL,
                what="backlog",
                error=BacklogStoreUnavailableError,
                connect_timeout_s=connect_timeout_s,
            )
        )


class _SqliteCursor:
    """A sqlite3 cursor that takes the `%s` parameters of the PostgreSQL statements."""

    def __init__(self, cur: sqlite3.Cursor) -> None:
        self._cur = cur

    def execute(self, sql: str, args: Sequence = ()) -> None:
        self._cur.execute(sql.replace("%s", "?"), tuple(args))

    def fetchone(self):
        return self._cur.fetchone()

    def fetchall(self):
        return self._cur.fetchall()


class _Sqlite:
    _lock = threading.Lock()

    def __init__(self, path: str) -> None:
        self._conn = sqlite3.connect(path, timeout=30, check_same_thread=False, isolation_level=None)
        self._conn.executescript(_DDL)

    @contextmanager
    def transaction(self) -> Iterator[_SqliteCursor]:
        with self._lock:
            cur = self._conn.cursor()
            cur.execute("BEGIN IMMEDIATE")
            try:
                yield _SqliteCursor(cur)
            except BaseException:
                cur.execute("ROLLBACK")
                raise
            cur.execute("COMMIT")

    def insert_many(self, cur: _SqliteCursor, sql: str, rows: list[tuple]) -> None:
        one = sql.replace("VALUES %s", "VALUES (" + ", ".join(["%s"] * len(rows[0])) + ")")
        for row in rows:
            cur.execute(one, row)

    def close(self) -> None:
        self._conn.close()


class SqliteBacklogStore(BacklogStore):
    """The stand-in: a SQLite file (`backlog.sqlite` in `directory`; in memory without one)."""

    def __init__(self, directory: str | Path | None) -> None:
        super().__init__(_Sqlite(str(Path(directory) / "backlog.sqlite") if directory else ":memory:"))


def open_store(url: str | None, directory: str | Path | None) -> BacklogStore:
    """The store at PostgreSQL `url`; without one, the stand-in in `directory` (a Dagster instance's root)."""
    return PostgresBacklogStore(url) if url else SqliteBacklogStore(directory)
