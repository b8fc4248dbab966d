"""The cross-batch dedup index in PostgreSQL: point lookups, and first-writer-wins inserts decided by the database.

The index holds only documents of published batches. Tables (`schema.py`, version 3; created on first use, an
earlier version upgraded in place by `upgrade.py`):

    dedup_attempts  one row per try at publishing a batch: (attempt, num, batch_id, state pending|published)
    dedup_kept      one row per kept document: its exact hash and MinHash band keys in UNIQUE columns (one owner
                    per key; NULL where another document owns it), its doc id and signature
    dedup_handover  keys a re-run takes over from its batch's earlier publication when it is published

Protocol (`cleaned_shards`): clean with lookups, which see published attempts only -> `reserve_batch` inserts the
kept documents as a *pending* attempt, first writer wins -> exclusion sink and manifest (which names the attempt)
-> `publish` marks the attempt published. Why pending rows rather than publishing first: the index decides which
of two concurrent batches keeps a new document, and that decision must precede the manifest that lists it; a
manifest written first could not be corrected without a second manifest write (the same window, moved). So a
crash at any point leaves either nothing visible or a manifest whose attempt can be told to be published:

* the attempt's session holds a PostgreSQL advisory lock (`dedup_attempts.lock_key`) from `reserve_batch` to
  `publish`; a process that dies loses its session and so the lock. That is the liveness signal, PostgreSQL's own.
* `begin_batch` resolves every pending attempt whose lock is free: published if the batch's manifest names it
  (`is_published`, the S3 check the caller passes), otherwise its rows are deleted. A dead attempt never makes a
  later batch drop a document, and a batch killed after its manifest is in the index before the next lookups.
* a pending key blocks: a batch whose insert meets a key held by a pending attempt rolls its transaction back,
  waits on that attempt's lock (bounded by `wait_s`), resolves it if it died, and tries again. So two concurrent
  batches with the same new document never both keep it (the second waits, then finds it published) and never
  both drop it (a dead first writer's rows are deleted before the second decides). A key held by a published
  document of another batch is decided as before: exact -> duplicate, band -> near duplicate by signature
  estimate. Those are handed back as late drops and never inserted. Writers of keys take turns (a transaction
  lock, `schema.KEYS_LOCK`), and no transaction that holds inserted rows waits on an attempt, so none deadlock.

Re-running a batch: lookups ignore the batch's own rows, and its earlier publication stays visible until the
re-run is published; then, in one transaction, the keys both share pass to the re-run (`dedup_handover`) and
the earlier publication's rows go. What is left open: an attempt whose PostgreSQL session ends while its process
goes on to write the manifest can be judged dead first; its `publish` then fails (the step fails and its retry
re-commits), and if it is never re-run, later batches may keep a second copy of its documents; never lose one.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from contextlib import contextmanager

import numpy as np

from pipeline_project.cleaning.dedup import attempts, schema
from pipeline_project.cleaning.dedup import copies as copy_counts
from pipeline_project.cleaning.dedup import reserve as reserving
from pipeline_project.cleaning.dedup.attempts import AttemptLostError
from pipeline_project.cleaning.dedup.index import IndexEntry, reserve_and_publish
from pipeline_project.cleaning.dedup.traffic import IndexTraffic, first_line, row_bytes
from pipeline_project.cleaning.dedup.upgrade import ensure_tables
from pipeline_project.cleaning.errors import CleaningError
from pipeline_project.common.postgres import connect_kwargs

log = logging.getLogger(__name__)

# The staleness bound of a pending attempt: its writer's session, idle (no query) for this long, is ended by the
# server, so its lock is free and the next batch resolves it. Above any gap between two queries of a live writer (a
# chunk's filtering, the manifest write); the server's keepalives bound a dead host's far sooner (`SERVER_KEEPALIVES`).
STALE_ATTEMPT_S = 1800.0

__all__ = ["AttemptLostError", "DedupStoreUnavailableError", "IndexTraffic", "PostgresDedupIndex"]

_LOOKUP_CHUNK = 100_000
_MAX_ROUNDS = 50  # reserve tries: each waits out or resolves the pending attempts it met


class DedupStoreUnavailableError(CleaningError):
    """The dedup database cannot be reached or answered with an error."""


class PostgresDedupIndex:
    """Same lookups as `LocalIndex` (a band key keeps its first owner), over PostgreSQL (`url`: a libpq string).

    `is_published(batch_id, attempt)`: whether the batch's published manifest names the attempt (the asset checks
    S3). Without it, a dead attempt reserved for a manifest is left pending (its keys stay blocked), and one that
    `commit_batch` reserved (no manifest) is deleted. `wait_s`: how long a reserve waits on another live attempt.
    """

    def __init__(
        self,
        url: str,
        num_perm: int = 112,
        num_bands: int = 14,
        connect_timeout_s: int = 10,
        schema: str = "dedup",
        is_published: Callable[[str, str], bool] | None = None,
        wait_s: float = 600.0,
        stale_s: float = STALE_ATTEMPT_S,
    ):
        if not schema.replace("_", "").isalnum():
            raise CleaningError(f"dedup index schema {schema!r}: letters, digits and _ only")
        self.url = url
        self.schema = schema
        self.num_perm = num_perm
        self.num_bands = num_bands
        self.connect_timeout_s = connect_timeout_s
        self.is_published = is_published
        self.wait_s = wait_s
        self.stale_s = stale_s
        self.batch_id: str | None = None
        self._entries: dict[int, tuple[str, str, bytes | None]] = {}
        self._conn = None
        self._held: dict[str, int] = {}  # attempts whose lock this session holds -> the session's backend pid
        self.traffic = IndexTraffic()

    # -- connection -------------------------------------------------------------------------------------------
    def _connect(self):
        import psycopg2

        if self._conn is None or self._conn.closed:
            try:
                # each index lives in a schema of its own (one per pipeline deployment, or per test)
                # a session idle for `stale_s` ends, and its attempts' locks with it: a pending attempt never outlives
                # a writer that stopped (alive or not) by more than that
                options = f"-c search_path={self.schema} -c idle_session_timeout={int(self.stale_s * 1000)}"
                self._conn = psycopg2.connect(self.url, options=options, **connect_kwargs(self.connect_timeout_s))
            except psycopg2.Error as exc:
                raise DedupStoreUnavailableError(f"dedup index database unreachable: {first_line(exc)}") from None
            self._ensure_schema()
        return self._conn

    @contextmanager
    def cursor(self):
        """A cursor in one transaction (committed on success, rolled back on error); lost: `DedupStoreUnavailableError`."""
        import psycopg2

        conn = self._connect()
        try:
            with conn, conn.cursor() as cur:
                yield cur
        except (psycopg2.OperationalError, psycopg2.InterfaceError) as exc:  # Interface: `with conn` on an ended one
            self.close()
            raise DedupStoreUnavailableError(f"dedup index database failed: {first_line(exc)}") from None

    def _ensure_schema(self) -> None:
        import psycopg2

        try:
            ensure_tables(self._conn, self.schema, self.num_perm, self.num_bands)
        except (psycopg2.OperationalError, psycopg2.InterfaceError) as exc:  # a deadlock, a lost connection
            self.close()
            raise DedupStoreUnavailableError(f"dedup index database failed: {first_line(exc)}") from None

    def close(self) -> None:
        """Close the session: the locks of its attempts go with it (a pending one is resolved by the next batch)."""
        self._held.clear()
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    # -- the LocalIndex lookups ------------------------------------------------------------------------------------
    def begin_batch(self, batch_id: str) -> None:
        """Resolve dead attempts; lookups from now on ignore the batch's own rows (a re-run must not find itself)."""
        self.batch_id = batch_id
        self._entries.clear()
        self.resolve_dead_attempts()

    def __len__(self) -> int:
        with self.cursor() as cur:
            cur.execute(f"SELECT count(*) FROM dedup_kept d {attempts.VISIBLE}")
            return int(cur.fetchone()[0])

    def _lookup(self, columns: list[str], keys: np.ndarray) -> np.ndarray:
        """keys (docs, len(columns)): each column's keys against that key column -> entry numbers or -1."""
        keys = np.ascontiguousarray(keys, dtype=np.uint64).reshape(-1, len(columns))
        out = np.full(keys.shape, -1, dtype=np.int64)
        if keys.size == 0:
            return out
        found: dict[tuple[int, int], int] = {}
        started = time.perf_counter()
        as_signed = keys.view(np.int64)
        step = max(1, _LOOKUP_CHUNK // len(columns))
        with self.cursor() as cur:
            for start in range(0, len(keys), step):
                wanted = [sorted(set(as_signed[start : start + step, c].tolist()) - {0}) for c in range(len(columns))]
                cur.execute(
                    f"SELECT d.id, a.batch_id, d.doc_id, d.signature, {', '.join(f'd.{c}' for c in columns)} "
                    f"FROM dedup_kept d {attempts.VISIBLE} WHERE a.batch_id <> %s AND ("
                    + " OR ".join(f"d.{c} = ANY(%s)" for c in columns)
                    + ")",
                    (self.batch_id or "", *wanted),
                )
                for doc, batch, doc_id, sig, *held in cur.fetchall():
                    self._entries[doc] = (batch, doc_id, bytes(sig) if sig is not None else None)
                    for c, key in enumerate(held):
                        if key is not None:
                            found[(c, key)] = doc
                    self.traffic.rows_read += 1
                    self.traffic.bytes_read += row_bytes(batch, doc_id, sig)
        self.traffic.keys_queried += int(np.count_nonzero(keys))
        self.traffic.lookup_s += time.perf_counter() - started
        if found:
            for (r, c), key in np.ndenumerate(as_signed):
                doc = found.get((c, key))
                if doc is not None:
                    out[r, c] = doc
        return out

    def lookup_exact(self, keys: np.ndarray) -> np.ndarray:
        return self._lookup(["exact"], keys).reshape(np.shape(keys))

    def lookup_bands(self, band_keys: np.ndarray) -> np.ndarray:
        """band_keys: (docs, bands) -> (docs, bands) entry numbers or -1."""
        return self._lookup(schema.key_columns(self.num_bands)[1:], band_keys).reshape(np.shape(band_keys))

    def entry(self, number: int) -> IndexEntry:
        batch, doc_id, _ = self._entries[int(number)]
        return IndexEntry(batch, doc_id)

    def signature(self, number: int) -> np.ndarray:
        sig = self._entries[int(number)][2]
        return np.frombuffer(sig, dtype=np.uint32) if sig else np.zeros(self.num_perm, dtype=np.uint32)

    # -- attempts: reserve, publish, abandon ------------------------------------------------------------------
    def commit_batch(
        self, batch_id, doc_ids, exact_keys, band_keys, signatures, near_threshold: float, before_publish=None
    ) -> dict:
        """Reserve and publish at once (no manifest); `before_publish(attempt, late)` runs in between (copy counts)."""
        return reserve_and_publish(
            self, batch_id, doc_ids, exact_keys, band_keys, signatures, near_threshold, before_publish
        )

    def reserve_batch(
        self,
        batch_id: str,
        attempt: str,
        doc_ids: Sequence[str],
        exact_keys: np.ndarray,
        band_keys: np.ndarray,
        signatures: np.ndarray,
        near_threshold: float,
        by_manifest: bool = True,
    ) -> dict[int, str]:
        """Insert one batch's kept documents as the pending `attempt`; returns {row: reason} for those that a
        published document of another batch holds (first writer wins). Lookups ignore them until `publish`."""
        started = time.perf_counter()
        self.hold_attempt(attempt)
        args = reserving.rows_of(self, doc_ids, exact_keys, band_keys, signatures)
        for _ in range(_MAX_ROUNDS):
            try:
                late = reserving.reserve_once(self, batch_id, attempt, doc_ids, *args, near_threshold, by_manifest)
                break
            except reserving.Blocked as blocked:
                for other in sorted(blocked.pending):
                    self.await_attempt(other)
        else:
            raise DedupStoreUnavailableError(f"dedup index: attempt {attempt} kept meeting pending keys; try again")
        self.traffic.commit_s += time.perf_counter() - started
        if late:
            log.info("dedup index: %d documents of %s were published first by another batch", len(late), batch_id)
        return late

    def confirm(self, attempt: str) -> None:
        """Raise unless this session still holds the attempt's lock (call it right before the manifest write)."""
        pid = self._held.get(attempt)
        with self.cursor() as cur:
            cur.execute("SELECT pg_backend_pid()")
            if pid is None or cur.fetchone()[0] != pid:
                raise AttemptLostError(f"dedup index: the session of attempt {attempt} ended; not publishing it")

    def publish(self, attempt: str) -> None:
        """Make the attempt's documents visible to lookups (after its manifest is written)."""
        with self.cursor() as cur:
            if not attempts.publish_rows(cur, attempt):
                raise AttemptLostError(
                    f"dedup index: attempt {attempt} was judged dead (its PostgreSQL session ended) and its rows "
                    "deleted; its manifest is written, so re-run the batch to put its documents in the index"
                )
        self.release_attempt(attempt)

    def abandon(self, attempt: str) -> None:
        """Give up an attempt after a failure: delete its rows, or publish them if its manifest made it out after
        all (a write whose answer was lost). Best effort: what fails here, the next `begin_batch` resolves."""
        try:
            if self.is_published is None:
                with self.cursor() as cur:
                    attempts.remove_attempt(cur, attempt)
            else:
                self._resolve(attempt, strict=False)
            self.release_attempt(attempt)
        except Exception as exc:  # noqa: BLE001 - the failure being handled matters more than this one
            log.warning("dedup index: could not abandon attempt %s now (%s); it will be resolved later", attempt, exc)

    def resolve_dead_attempts(self) -> int:
        """Resolve every pending attempt whose session is gone; returns how many."""
        with self.cursor() as cur:
            cur.execute("SELECT attempt FROM dedup_attempts WHERE state = 'pending'")
            pending = [row[0] for row in cur.fetchall() if row[0] not in self._held]
        resolved = 0
        for attempt in pending:
            with self.cursor() as cur:
                cur.execute("SELECT pg_try_advisory_lock(%s)", (attempts.lock_key(attempt),))
                if not cur.fetchone()[0]:
                    continue  # alive: its own process publishes or abandons it
            try:
                resolved += self._resolve(attempt, strict=False)
            finally:
                self._release(attempt)
        return resolved

    # -- attempts: locks (public: the sharded index takes them shard by shard) ---------------------------------
    def hold_attempt(self, attempt: str) -> None:
        if attempt in self._held:
            return
        with self.cursor() as cur:
            cur.execute("SELECT pg_advisory_lock(%s), pg_backend_pid()", (attempts.lock_key(attempt),))
            self._held[attempt] = cur.fetchone()[1]

    def forget_attempt(self, attempt: str) -> None:
        """Stop counting the attempt's lock as held (its session ended, taking the lock with it)."""
        self._held.pop(attempt, None)

    def _release(self, attempt: str) -> None:
        with self.cursor() as cur:
            cur.execute("SELECT pg_advisory_unlock(%s)", (attempts.lock_key(attempt),))

    def release_attempt(self, attempt: str) -> None:
        if self._held.pop(attempt, None) is not None:
            self._release(attempt)

    def await_attempt(self, attempt: str) -> None:
        """Wait until `attempt`'s session is gone or has finished with it, then resolve it if it is still pending."""
        try:
            with self.cursor() as cur:
                cur.execute("SET LOCAL lock_timeout = %s", (f"{int(self.wait_s * 1000)}ms",))
                cur.execute("SELECT pg_advisory_lock(%s)", (attempts.lock_key(attempt),))
        except DedupStoreUnavailableError as exc:
            raise DedupStoreUnavailableError(
                f"dedup index: waited {self.wait_s:g}s for attempt {attempt} of another batch ({exc})"
            ) from None
        try:
            self._resolve(attempt, strict=True)
        finally:
            self._release(attempt)

    def _resolve(self, attempt: str, strict: bool) -> int:
        """The caller holds the attempt's lock: publish it if its manifest names it, else delete its rows."""
        with self.cursor() as cur:
            cur.execute("SELECT batch_id, state, by_manifest FROM dedup_attempts WHERE attempt = %s", (attempt,))
            row = cur.fetchone()
        if row is None or row[1] == "published":
            return 0
        batch_id, _, by_manifest = row
        if by_manifest and self.is_published is None:
            if strict:
                raise CleaningError(
                    f"dedup index: attempt {attempt} of batch {batch_id} is dead and pending; only an index opened "
                    "with is_published (the batch's manifest) can tell whether it was published"
                )
            return 0
        published = by_manifest and self.is_published(batch_id, attempt)
        with self.cursor() as cur:
            if published:
                attempts.publish_rows(cur, attempt)
            else:
                attempts.remove_attempt(cur, attempt)
        log.info("dedup index: dead attempt %s of %s %s", attempt, batch_id, "published" if published else "removed")
        return 1

    @property
    def stats(self) -> dict:
        with self.cursor() as cur:
            cur.execute(
                "SELECT c.reltuples::bigint FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE c.relname = 'dedup_kept' AND n.nspname = %s",
                (self.schema,),
            )
            row = cur.fetchone()
        return {"entries_estimate": max(0, int(row[0])) if row else 0, "backend": "postgres"}

    # -- duplicate-cluster counts ----------------------------------------------------------------------------
    def batch_copies(self, batch_id: str, attempt: str, copies: Counter, kept: list[str]) -> dict[str, tuple[int, int]]:
        copy_counts.record(self, attempt, copies)
        found = copy_counts.counts(self, [f"{batch_id}/{d}" for d in kept], attempt, batch_id)
        return {d: found[f"{batch_id}/{d}"] for d in kept}
