"""The dedup index split across several PostgreSQL servers: one `DedupIndex` over N shards, each a
`PostgresDedupIndex` with the same schema (version 3, unchanged), with first-writer-wins, the reserve -> publish
attempt protocol and its liveness kept as on one server (`postgres.py`, whose docstring this one builds on).

Placement. A document lives on the shard of its exact key: `shard_of(exact) = splitmix64(exact) mod N`. So each
shard's rows are whole documents (keys, doc id, signature), an exact key can only ever be owned on its own shard,
and a shard holds ~1/N of the bytes. Each shard records its place (`dedup_meta` 'shard' = "i/N") on first use and
an index opened with other URLs, another order or another N is refused; so is a database that already holds an
unplaced index. Moving documents to a new N (resharding) is not built.

Lookups. `lookup_exact` asks each key's own shard; `lookup_bands` asks every shard (a band key may be owned on any
of them). Entry numbers encode the shard, `id * N + shard`, so `entry()` and `signature()` go to the shard that
answered. A band key has one owner across all shards (below), so the merged answer is the one server's.

Reserve. One transaction per shard, all holding every shard's writers' lock (`KEYS_LOCK`), taken in the fixed
order shard 0, 1, ...: writers of keys take turns across all shards exactly as they take turns on one server,
and no two can wait on each other in a cycle (a global order; a single-shard writer, `publish_rows` in the
resolution of a dead attempt, holds one lock and waits on nothing). Inside: the attempt's row on every shard, the
owners of its keys read from every shard, `reserve.decide` on the union (first writer wins, the same late drops
and reasons), each kept document inserted into its shard with the keys it comes to own (none that any shard
holds). A pending owner on any shard: everything rolls back, the reserve waits on that attempt's lock on that
shard (bounded by `wait_s`), resolves it there if it died, and tries again. The shards then commit in order.

Liveness, per shard. The writer holds the attempt's advisory lock on every shard (one session each) from reserve
to publish; `confirm` checks all of them before the manifest is written. `begin_batch` resolves, on each shard,
every pending attempt whose lock there is free, by the batch's manifest (`is_published`): the manifest is the one
commit point for all shards, so each shard settles a dead attempt the same way. Each session has the server-side
idle bound (`stale_s`) and the keepalives of `postgres.py`, per shard host.

Failures.
* A shard unreachable or cut mid-reserve: the reserve raises `DedupStoreUnavailableError`. Before the commits
  nothing was written; a cut during the commits leaves the earlier shards' rows committed (pending, invisible):
  the reserve removes them from every shard it still reaches (no manifest can name an attempt whose reserve did
  not return), and a shard it cannot reach holds at most rows whose session is gone, removed as dead by the next
  `begin_batch` there. A retry (a new attempt) admits every document once.
* Publish is one transaction per shard too: the batch's earlier publication leaves every shard before any key is
  handed over, and a handed-over key some other shard holds is given up (`shard_writes.publish_all`). A failure
  during the commits (a host cut, a crash) leaves some shards published and the others pending; the manifest
  names the attempt, so the rest is published shard by shard (now, or by the next `begin_batch` once the writer's
  sessions are gone). Until then a batch's documents on those shards are not looked up: a batch in between may
  keep a second copy of one (never drop one), as on one server when a writer dies after its manifest.
* `commit_batch` (no manifest) publishes shard by shard after a failed publish too; what it cannot reach stays
  pending and, with no manifest, is removed when found dead: those documents may be kept again later.
* What is left open on one server stays open per shard: a shard session that ends while the writer goes on to
  write its manifest can be judged dead there first; its rows there are then deleted and `publish` fails.

Copy counts (`copies.py`) live on the shard of their target's hash, so each target's counts are on one shard.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence

import numpy as np

from pipeline_project.cleaning.dedup import attempts, shard_writes
from pipeline_project.cleaning.dedup import copies as copy_counts
from pipeline_project.cleaning.dedup import reserve as reserving
from pipeline_project.cleaning.dedup.attempts import AttemptLostError
from pipeline_project.cleaning.dedup.index import IndexEntry, reserve_and_publish
from pipeline_project.cleaning.dedup.postgres import STALE_ATTEMPT_S, DedupStoreUnavailableError, PostgresDedupIndex
from pipeline_project.cleaning.dedup.traffic import IndexTraffic
from pipeline_project.cleaning.errors import CleaningError

log = logging.getLogger(__name__)

__all__ = ["ShardedDedupIndex", "shard_of"]

_MAX_ROUNDS = 50  # reserve tries, as on one server


def shard_of(exact: np.ndarray, shards: int) -> np.ndarray:
    """The shard of each exact key (uint64): splitmix64's finalizer, mod `shards`. Fixed forever: changing it or
    the number of shards moves documents, which is not built."""
    z = np.asarray(exact, dtype=np.uint64).copy()
    z ^= z >> np.uint64(30)
    z *= np.uint64(0xBF58476D1CE4E5B9)
    z ^= z >> np.uint64(27)
    z *= np.uint64(0x94D049BB133111EB)
    z ^= z >> np.uint64(31)
    return (z % np.uint64(shards)).astype(np.int64)


class ShardedDedupIndex:
    """`PostgresDedupIndex`'s contract over `urls` (one PostgreSQL database each, in a fixed order: the shards).

    The other arguments are `PostgresDedupIndex`'s, the same for every shard."""

    def __init__(
        self,
        urls: Sequence[str],
        num_perm: int = 112,
        num_bands: int = 14,
        connect_timeout_s: int = 10,
        schema: str = "dedup",
        is_published: Callable[[str, str], bool] | None = None,
        wait_s: float = 600.0,
        stale_s: float = STALE_ATTEMPT_S,
    ):
        if not urls:
            raise CleaningError("a sharded dedup index needs at least one database URL")
        self.shards = [
            PostgresDedupIndex(
                url,
                num_perm=num_perm,
                num_bands=num_bands,
                connect_timeout_s=connect_timeout_s,
                schema=schema,
                is_published=is_published,
                wait_s=wait_s,
                stale_s=stale_s,
            )
            for url in urls
        ]
        self.num_perm, self.num_bands, self.schema = num_perm, num_bands, schema
        self.is_published = is_published
        self._placed = False

    def shard_of(self, exact: np.ndarray) -> np.ndarray:
        return shard_of(exact, len(self.shards))

    @property
    def traffic(self) -> IndexTraffic:
        """The shards' traffic, summed."""
        total = IndexTraffic()
        for shard in self.shards:
            for name, value in vars(shard.traffic).items():
                setattr(total, name, getattr(total, name) + value)
        return total

    def _place(self) -> None:
        """Check, once, that each database is this index's shard i of N (recording it on first use)."""
        if self._placed:
            return
        n = len(self.shards)
        for s, shard in enumerate(self.shards):
            with shard.cursor() as cur:
                cur.execute("SELECT value FROM dedup_meta WHERE name = 'shard'")
                row = cur.fetchone()
                if row is None:
                    cur.execute("SELECT EXISTS (SELECT 1 FROM dedup_attempts)")
                    if cur.fetchone()[0]:
                        raise CleaningError(
                            f"dedup index shard {s} ({shard.schema}) holds an index not placed for {n} shards; "
                            "moving documents between shards is not built: use empty databases"
                        )
                    cur.execute(
                        "INSERT INTO dedup_meta (name, value) VALUES ('shard', %s) ON CONFLICT DO NOTHING",
                        (f"{s}/{n}",),
                    )
                    cur.execute("SELECT value FROM dedup_meta WHERE name = 'shard'")
                    row = cur.fetchone()
            if row[0] != f"{s}/{n}":
                raise CleaningError(
                    f"dedup index: database {s} of {n} is shard {row[0]} of another layout; give the shard URLs "
                    "in the order and number the index was created with"
                )
        self._placed = True

    def close(self) -> None:
        """Close every shard's session: the locks of its attempts go with them (resolved by the next batch)."""
        for shard in self.shards:
            shard.close()

    # -- lookups -------------------------------------------------------------------------------------------------
    def begin_batch(self, batch_id: str) -> None:
        self._place()
        for shard in self.shards:
            shard.begin_batch(batch_id)

    def resolve_dead_attempts(self) -> int:
        return sum(shard.resolve_dead_attempts() for shard in self.shards)

    def __len__(self) -> int:
        return sum(len(shard) for shard in self.shards)

    def _numbered(self, found: np.ndarray, s: int) -> np.ndarray:
        return np.where(found >= 0, found * len(self.shards) + s, -1)

    def lookup_exact(self, keys: np.ndarray) -> np.ndarray:
        self._place()
        keys = np.asarray(keys, dtype=np.uint64)
        out = np.full(keys.shape, -1, dtype=np.int64)
        home = self.shard_of(keys)
        for s, shard in enumerate(self.shards):
            mine = home == s
            if mine.any():
                out[mine] = self._numbered(shard.lookup_exact(keys[mine]), s)
        return out

    def lookup_bands(self, band_keys: np.ndarray) -> np.ndarray:
        self._place()
        out = None
        for s, shard in enumerate(self.shards):
            found = self._numbered(shard.lookup_bands(band_keys), s)
            out = found if out is None else np.where(out >= 0, out, found)  # one owner per key: at most one hit
        return out

    def entry(self, number: int) -> IndexEntry:
        n = len(self.shards)
        return self.shards[int(number) % n].entry(int(number) // n)

    def signature(self, number: int) -> np.ndarray:
        n = len(self.shards)
        return self.shards[int(number) % n].signature(int(number) // n)

    @property
    def stats(self) -> dict:
        estimate = sum(shard.stats["entries_estimate"] for shard in self.shards)
        return {"entries_estimate": estimate, "backend": "postgres", "shards": len(self.shards)}

    # -- attempts --------------------------------------------------------------------------------------------------
    def commit_batch(
        self, batch_id, doc_ids, exact_keys, band_keys, signatures, near_threshold: float, before_publish=None
    ) -> dict:
        """Reserve and publish at once (no manifest); `before_publish(attempt, late)` runs in between."""
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
        """Insert the batch's kept documents, each into its shard, as the pending `attempt` (first writer wins
        across all shards); returns {row: reason} of the late drops. A failure leaves nothing of the attempt."""
        started = time.perf_counter()
        self._place()
        try:
            for shard in self.shards:  # the attempt's lock on every shard, held until publish or abandon
                shard.hold_attempt(attempt)
            args = reserving.rows_of(self, doc_ids, exact_keys, band_keys, signatures)
            for _ in range(_MAX_ROUNDS):
                try:
                    late = shard_writes.reserve_once(
                        self, batch_id, attempt, doc_ids, *args, near_threshold, by_manifest
                    )
                    break
                except shard_writes.Blocked as blocked:
                    for s, other in sorted(blocked.pending):
                        self.shards[s].await_attempt(other)
            else:
                raise DedupStoreUnavailableError(f"dedup index: attempt {attempt} kept meeting pending keys; try again")
        except BaseException:
            self._withdraw(attempt)
            raise
        self.shards[0].traffic.commit_s += time.perf_counter() - started
        if late:
            log.info("dedup index: %d documents of %s were published first by another batch", len(late), batch_id)
        return late

    def _withdraw(self, attempt: str) -> None:
        """After a failed reserve: delete the attempt's rows (committed on some shards when a commit failed) from
        every shard that answers, and let go of its locks. No manifest names it: its reserve never returned."""
        for s, shard in enumerate(self.shards):
            try:
                with shard.cursor() as cur:
                    attempts.remove_attempt(cur, attempt)
                shard.release_attempt(attempt)
            except Exception as exc:  # noqa: BLE001 - the reserve's own failure is the one raised
                shard.forget_attempt(attempt)
                log.warning("dedup index: shard %d: attempt %s left to be resolved as dead (%s)", s, attempt, exc)

    def confirm(self, attempt: str) -> None:
        """Raise unless every shard's session still holds the attempt's lock (right before the manifest write)."""
        for shard in self.shards:
            shard.confirm(attempt)

    def publish(self, attempt: str) -> None:
        """Make the attempt's documents visible on every shard (after its manifest is written)."""
        try:
            shard_writes.publish_all(self.shards, attempt)
        except (DedupStoreUnavailableError, AttemptLostError) as exc:
            self._publish_each(attempt, exc)
            raise
        for shard in self.shards:
            shard.release_attempt(attempt)

    def _publish_each(self, attempt: str, cause: Exception) -> None:
        """After a failed `publish_all`: publish the shards that answer, one by one (the manifest is the commit
        point); a shard that does not answer is published by the next `begin_batch` there."""
        for s, shard in enumerate(self.shards):
            try:
                shard.publish(attempt)
            except Exception as exc:  # noqa: BLE001 - the first failure is the one raised
                log.warning("dedup index: shard %d: attempt %s not published now (%s; %s)", s, attempt, exc, cause)

    def abandon(self, attempt: str) -> None:
        """Give up the attempt on every shard (each: delete its rows, or publish them if its manifest is out)."""
        for shard in self.shards:
            shard.abandon(attempt)

    # -- duplicate-cluster counts ----------------------------------------------------------------------------------
    def _shard_of_target(self, target: str) -> int:
        return int.from_bytes(hashlib.md5(target.encode("utf-8")).digest()[:8], "big") % len(self.shards)

    def batch_copies(self, batch_id: str, attempt: str, copies: Counter, kept: list[str]) -> dict[str, tuple[int, int]]:
        by_shard: list[Counter] = [Counter() for _ in self.shards]
        for (target, kind), n in copies.items():
            by_shard[self._shard_of_target(target)][(target, kind)] += n
        wanted: list[list[str]] = [[] for _ in self.shards]
        for d in kept:
            wanted[self._shard_of_target(f"{batch_id}/{d}")].append(f"{batch_id}/{d}")
        found: dict[str, tuple[int, int]] = {}
        for shard, recorded, targets in zip(self.shards, by_shard, wanted):
            copy_counts.record(shard, attempt, recorded)
            found.update(copy_counts.counts(shard, targets, attempt, batch_id))
        return {d: found[f"{batch_id}/{d}"] for d in kept}
