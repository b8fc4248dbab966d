"""The cross-batch dedup index in PostgreSQL: point lookups, and first-writer-wins inserts decided by the database.

Tables (created on first use):

    dedup_docs   one row per kept document: (id, batch_id, doc_id, exact_key, signature)
    dedup_exact  exact content hash -> the document that holds it (PRIMARY KEY: one owner per hash)
    dedup_bands  MinHash band key   -> the first document seen with it (PRIMARY KEY: one owner per band)

A batch's cost is O(batch): lookups send its keys (`= ANY(array)`), inserts go through COPY into a temporary
table. Concurrent batches stay correct without any Dagster pool: `commit_batch` inserts with
`ON CONFLICT DO NOTHING`, and PostgreSQL makes a second writer of the same key wait for the first to commit,
then reports the key as taken. A document whose exact hash was taken meanwhile is a duplicate; one whose
band key was taken by a similar enough document (signature estimate, like every cross-batch candidate) is
a near duplicate. Both are handed back as late drops and their rows removed in the same transaction, so the
index only ever holds documents that are in a committed batch's shards. Keys are inserted in sorted order,
so two writers never deadlock.

Re-running a batch replaces its own rows: lookups ignore the batch's own rows, and `commit_batch` deletes
them before inserting. Same semantics as the in-memory `DedupIndex` (a band key keeps its first owner).
"""

from __future__ import annotations

import io
import logging
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass

import numpy as np

from pipeline_project.cleaning.dedup_index import DedupIndex, IndexEntry
from pipeline_project.cleaning.errors import CleaningError

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
_LOOKUP_CHUNK = 100_000
_SCHEMA = """
CREATE TABLE IF NOT EXISTS dedup_meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS dedup_docs (
    id BIGSERIAL PRIMARY KEY,
    batch_id TEXT NOT NULL,
    doc_id TEXT NOT NULL,
    exact_key BIGINT,
    signature BYTEA,
    UNIQUE (batch_id, doc_id)
);
CREATE TABLE IF NOT EXISTS dedup_exact (
    key BIGINT PRIMARY KEY,
    doc BIGINT NOT NULL REFERENCES dedup_docs (id) ON DELETE CASCADE
);
CREATE TABLE IF NOT EXISTS dedup_bands (
    key BIGINT PRIMARY KEY,
    doc BIGINT NOT NULL REFERENCES dedup_docs (id) ON DELETE CASCADE
);
CREATE INDEX IF NOT EXISTS dedup_exact_doc ON dedup_exact (doc);
CREATE INDEX IF NOT EXISTS dedup_bands_doc ON dedup_bands (doc);
"""


@dataclass
class IndexTraffic:
    """What one open index moved to and from the database: the per-batch cost that must not grow with history."""

    lookup_s: float = 0.0
    commit_s: float = 0.0
    keys_queried: int = 0
    rows_read: int = 0
    bytes_read: int = 0  # key, entry, batch id, document id and signature of every row a lookup or commit read back
    rows_written: int = 0
    bytes_written: int = 0  # the COPY text sent

    def as_dict(self) -> dict:
        return {k: round(v, 3) if isinstance(v, float) else v for k, v in asdict(self).items()}


def _row_bytes(batch: str, doc_id: str, sig) -> int:
    return 16 + len(batch) + len(doc_id) + (len(sig) if sig is not None else 0)


class DedupStoreUnavailableError(CleaningError):
    """The dedup database cannot be reached or answered with an error."""


def _signed(keys: np.ndarray) -> list[int]:
    """uint64 keys as the BIGINTs PostgreSQL stores (same 64 bits)."""
    return np.ascontiguousarray(keys, dtype=np.uint64).view(np.int64).tolist()


class PostgresDedupIndex:
    """Same lookups as `DedupIndex`, over a PostgreSQL database (`url`: a libpq connection string)."""

    def __init__(
        self, url: str, num_perm: int = 112, num_bands: int = 14, connect_timeout_s: int = 10, schema: str = "dedup"
    ):
        if not schema.replace("_", "").isalnum():
            raise CleaningError(f"dedup index schema {schema!r}: letters, digits and _ only")
        self.url = url
        self.schema = schema
        self.num_perm = num_perm
        self.num_bands = num_bands
        self.connect_timeout_s = connect_timeout_s
        self.batch_id: str | None = None
        self._entries: dict[int, tuple[str, str, bytes | None]] = {}
        self._conn = None
        self.traffic = IndexTraffic()

    # -- connection -------------------------------------------------------------------------------------------
    def _connect(self):
        import psycopg2

        if self._conn is None or self._conn.closed:
            try:
                # each index lives in a schema of its own (one per pipeline deployment, or per test)
                self._conn = psycopg2.connect(
                    self.url, connect_timeout=self.connect_timeout_s, options=f"-c search_path={self.schema}"
                )
            except psycopg2.Error as exc:
                raise DedupStoreUnavailableError(f"dedup index database unreachable: {_first_line(exc)}") from None
            self._ensure_schema()
        return self._conn

    @contextmanager
    def _cursor(self):
        import psycopg2

        conn = self._connect()
        try:
            with conn, conn.cursor() as cur:  # one transaction: committed on success, rolled back on error
                yield cur
        except psycopg2.OperationalError as exc:
            self.close()
            raise DedupStoreUnavailableError(f"dedup index database failed: {_first_line(exc)}") from None

    def _ensure_schema(self) -> None:
        with self._conn, self._conn.cursor() as cur:
            cur.execute("SELECT pg_advisory_xact_lock(hashtext('pipeline_project.dedup_schema'))")
            cur.execute(f"CREATE SCHEMA IF NOT EXISTS {self.schema}")
            cur.execute(_SCHEMA)
            cur.execute(
                "INSERT INTO dedup_meta (name, value) VALUES ('schema_version', %s), ('num_perm', %s), "
                "('num_bands', %s) ON CONFLICT (name) DO NOTHING",
                (str(SCHEMA_VERSION), str(self.num_perm), str(self.num_bands)),
            )
            cur.execute("SELECT name, value FROM dedup_meta")
            meta = dict(cur.fetchall())
        stored = (int(meta["schema_version"]), int(meta["num_perm"]), int(meta["num_bands"]))
        if stored != (SCHEMA_VERSION, self.num_perm, self.num_bands):
            raise CleaningError(
                f"dedup index schema/shape {stored} differs from this configuration "
                f"{(SCHEMA_VERSION, self.num_perm, self.num_bands)}: use another database or migrate"
            )

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    # -- the DedupIndex lookups ---------------------------------------------------------------------------------
    def begin_batch(self, batch_id: str) -> None:
        """Lookups from now on ignore the batch's own rows (a re-run must not find itself)."""
        self.batch_id = batch_id
        self._entries.clear()

    def __len__(self) -> int:
        with self._cursor() as cur:
            cur.execute("SELECT count(*) FROM dedup_docs")
            return int(cur.fetchone()[0])

    def _lookup(self, table: str, keys: np.ndarray) -> np.ndarray:
        flat = np.ascontiguousarray(keys, dtype=np.uint64).ravel()
        out = np.full(flat.shape, -1, dtype=np.int64)
        if flat.size == 0:
            return out.reshape(np.shape(keys))
        found: dict[int, int] = {}
        started = time.perf_counter()
        with self._cursor() as cur:
            signed = _signed(flat)
            for start in range(0, len(signed), _LOOKUP_CHUNK):
                cur.execute(
                    f"SELECT t.key, d.id, d.batch_id, d.doc_id, d.signature FROM {table} t "
                    "JOIN dedup_docs d ON d.id = t.doc WHERE t.key = ANY(%s) AND d.batch_id <> %s",
                    (signed[start : start + _LOOKUP_CHUNK], self.batch_id or ""),
                )
                for key, doc, batch, doc_id, sig in cur.fetchall():
                    found[key] = doc
                    self._entries[doc] = (batch, doc_id, bytes(sig) if sig is not None else None)
                    self.traffic.rows_read += 1
                    self.traffic.bytes_read += _row_bytes(batch, doc_id, sig)
        self.traffic.keys_queried += len(signed)
        self.traffic.lookup_s += time.perf_counter() - started
        if found:
            as_signed = flat.view(np.int64)
            for i, key in enumerate(as_signed.tolist()):
                doc = found.get(key)
                if doc is not None:
                    out[i] = doc
        return out.reshape(np.shape(keys))

    def lookup_exact(self, keys: np.ndarray) -> np.ndarray:
        return self._lookup("dedup_exact", keys)

    def lookup_bands(self, band_keys: np.ndarray) -> np.ndarray:
        """band_keys: (docs, bands) -> (docs, bands) entry numbers or -1."""
        return self._lookup("dedup_bands", band_keys)

    def entry(self, number: int) -> IndexEntry:
        batch, doc_id, _ = self._entries[int(number)]
        return IndexEntry(batch, doc_id)

    def signature(self, number: int) -> np.ndarray:
        sig = self._entries[int(number)][2]
        return np.frombuffer(sig, dtype=np.uint32) if sig else np.zeros(self.num_perm, dtype=np.uint32)

    # -- writes ---------------------------------------------------------------------------------------------------
    def commit_batch(
        self,
        batch_id: str,
        doc_ids: Sequence[str],
        exact_keys: np.ndarray,
        band_keys: np.ndarray,
        signatures: np.ndarray,
        near_threshold: float,
    ) -> dict[int, str]:
        """Insert one batch's kept documents; returns {row: reason} for those another batch committed first."""
        n = len(doc_ids)
        if n == 0:
            with self._cursor() as cur:
                cur.execute("DELETE FROM dedup_docs WHERE batch_id = %s", (batch_id,))
            return {}
        exact = np.asarray(exact_keys, dtype=np.uint64)
        bands = np.asarray(band_keys, dtype=np.uint64).reshape(n, self.num_bands)
        sigs = np.ascontiguousarray(signatures, dtype=np.uint32).reshape(n, self.num_perm)
        has_sig = (bands != 0).any(axis=1)
        started = time.perf_counter()
        with self._cursor() as cur:
            cur.execute("DELETE FROM dedup_docs WHERE batch_id = %s", (batch_id,))
            cur.execute("SELECT nextval(pg_get_serial_sequence('dedup_docs', 'id')) FROM generate_series(1, %s)", (n,))
            ids = [row[0] for row in cur.fetchall()]
            self._copy(
                cur,
                "dedup_docs",
                "id, batch_id, doc_id, exact_key, signature",
                (
                    f"{ids[i]}\t{_copy_text(batch_id)}\t{_copy_text(doc_ids[i])}\t{k}\t"
                    + (f"\\\\x{sigs[i].tobytes().hex()}" if has_sig[i] else "\\N")
                    + "\n"
                    for i, k in enumerate(_signed(exact))
                ),
            )
            late: dict[int, str] = {}
            owner_of = dict(zip(ids, range(n)))
            exact_rows = sorted((k, ids[i]) for i, k in enumerate(_signed(exact)) if k != 0)
            for key, owner in self._insert_keys(cur, "dedup_exact", exact_rows):
                i = owner_of[key[1]]
                late[i] = f"exact_duplicate_of:{owner[0]}/{owner[1]}"
            band_rows = sorted(
                (k, ids[i]) for i in np.flatnonzero(has_sig).tolist() if i not in late for k in _signed(bands[i])
            )
            for (_, doc), owner in self._insert_keys(cur, "dedup_bands", band_rows):
                i = owner_of[doc]
                if i in late or owner[0] == batch_id:
                    continue
                estimate = float(np.mean(sigs[i] == np.frombuffer(owner[2], dtype=np.uint32))) if owner[2] else 0.0
                if estimate >= near_threshold:
                    late[i] = f"near_duplicate_of:{owner[0]}/{owner[1]}"
            if late:
                cur.execute("DELETE FROM dedup_docs WHERE id = ANY(%s)", ([ids[i] for i in late],))
        self.traffic.commit_s += time.perf_counter() - started
        if late:
            log.info("dedup index: %d documents of %s were committed first by another batch", len(late), batch_id)
        return late

    def _insert_keys(self, cur, table: str, rows: list[tuple[int, int]]):
        """Insert (key, doc) rows; yield ((key, doc), (owner batch, owner doc id, owner signature)) for taken keys."""
        if not rows:
            return
        cur.execute(f"CREATE TEMP TABLE IF NOT EXISTS incoming_{table} (key BIGINT, doc BIGINT) ON COMMIT DROP")
        cur.execute(f"TRUNCATE incoming_{table}")
        self._copy(cur, f"incoming_{table}", "key, doc", (f"{k}\t{d}\n" for k, d in rows))
        cur.execute(
            f"INSERT INTO {table} (key, doc) SELECT key, doc FROM incoming_{table} ORDER BY key "
            "ON CONFLICT (key) DO NOTHING RETURNING key"
        )
        inserted = {row[0] for row in cur.fetchall()}
        taken = [(k, d) for k, d in rows if k not in inserted]
        if not taken:
            return
        cur.execute(
            f"SELECT t.key, d.batch_id, d.doc_id, d.signature FROM {table} t JOIN dedup_docs d ON d.id = t.doc "
            "WHERE t.key = ANY(%s)",
            ([k for k, _ in taken],),
        )
        owners = {key: (batch, doc_id, bytes(sig) if sig is not None else None) for key, batch, doc_id, sig in cur}
        self.traffic.rows_read += len(owners)
        self.traffic.bytes_read += sum(_row_bytes(*owner) for owner in owners.values())
        for key, doc in taken:
            yield (key, doc), owners[key]

    def _copy(self, cur, table: str, columns: str, rows: Iterator[str]) -> None:
        text = "".join(rows)
        cur.copy_expert(f"COPY {table} ({columns}) FROM STDIN", io.StringIO(text))
        self.traffic.rows_written += text.count("\n")
        self.traffic.bytes_written += len(text)

    @property
    def stats(self) -> dict:
        with self._cursor() as cur:
            cur.execute(
                "SELECT c.reltuples::bigint FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE c.relname = 'dedup_docs' AND n.nspname = %s",
                (self.schema,),
            )
            row = cur.fetchone()
        return {"entries_estimate": max(0, int(row[0])) if row else 0, "backend": "postgres"}

    # -- migration -------------------------------------------------------------------------------------------
    def import_index(self, index: DedupIndex) -> int:
        """Copy an S3-stored `DedupIndex` in, batch by batch (the migration path); returns documents imported."""
        imported = 0
        batch_of = np.asarray(index.doc_batch)
        exact_by_entry = np.zeros(len(index), dtype=np.uint64)
        exact_by_entry[index.exact_entries] = index.exact_keys
        bands_by_entry = np.zeros((len(index), index.num_bands), dtype=np.uint64)
        filled = np.zeros(len(index), dtype=np.int64)
        for key, entry in zip(index.band_keys.tolist(), index.band_entries.tolist()):
            if filled[entry] < index.num_bands:
                bands_by_entry[entry, filled[entry]] = key
                filled[entry] += 1
        for b, batch_id in enumerate(index.batches):
            rows = np.flatnonzero(batch_of == b)
            self.commit_batch(
                batch_id,
                [index.doc_ids[i] for i in rows],
                exact_by_entry[rows],
                bands_by_entry[rows],
                index.signatures[rows],
                near_threshold=2.0,  # an import keeps every document: nothing is similar enough to drop
            )
            imported += len(rows)
        return imported


def _copy_text(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
