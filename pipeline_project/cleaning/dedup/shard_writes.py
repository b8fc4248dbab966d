"""The writes of the sharded dedup index (`sharded.py`) that span every shard: a reserve and a publish, each in
one transaction per shard, all of them holding every shard's writers' lock (`schema.KEYS_LOCK`), taken in shard
order 0, 1, ... so two writers never wait on each other in a cycle.

`reserve_once` is `reserve.reserve_once` over N databases: it reads the owners of the attempt's keys on every
shard, decides first-writer-wins with `reserve.decide` on the union (so the same rows are dropped, for the same
reasons, as on one server), and inserts each kept document into its own shard (`ShardedDedupIndex.shard_of`)
under the attempt, with the keys it comes to own; a key another shard holds is owned there. Every shard gets the
attempt's row, documents or not, so publish, abandon, confirm and the resolution of a dead attempt apply alike
on all of them. A pending owner on any shard raises `Blocked` with (shard, attempt) pairs before anything is
inserted; the caller waits on each attempt's lock on that shard, then tries again.

`publish_all` makes an attempt visible on every shard: first the batch's earlier publication leaves every shard,
then the keys handed over (`dedup_handover`) that some other shard's row holds are given up (one owner per key
across shards, as `attempts.publish_rows` keeps it on one server), then `attempts.publish_rows` on each.

The transactions commit one shard after another (0, 1, ...): a failure during the commits leaves the earlier
shards committed and the later ones rolled back. What that leaves behind is settled by the caller (`sharded.py`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import numpy as np

from pipeline_project.cleaning.dedup import attempts, schema
from pipeline_project.cleaning.dedup import reserve as reserving
from pipeline_project.cleaning.dedup.attempts import AttemptLostError
from pipeline_project.cleaning.dedup.traffic import copy_text


class Blocked(Exception):
    """Keys of this reserve are held by pending attempts: {(shard, attempt)} to wait on, then try again."""

    def __init__(self, pending: set[tuple[int, str]]):
        super().__init__(sorted(pending))
        self.pending = pending


@contextmanager
def every_shard(shards) -> Iterator[list]:
    """A cursor on every shard, each in a transaction holding that shard's `KEYS_LOCK`, taken in shard order.

    On success the shards commit in order 0, 1, ...; a commit that fails raises `DedupStoreUnavailableError` and
    the shards after it roll back. Any other error rolls every shard back."""
    with ExitStack() as stack:
        # entered last to first, so that they leave (commit) first to last
        cursors = [stack.enter_context(shard.cursor()) for shard in reversed(shards)][::-1]
        for cur in cursors:
            cur.execute("SELECT pg_advisory_xact_lock(%s)", (schema.KEYS_LOCK,))
        yield cursors


def reserve_once(index, batch_id, attempt, doc_ids, exact, bands, sigs, has_sig, near_threshold, by_manifest):
    """One try at reserving the attempt on every shard; returns {row: reason} of the late drops."""
    n = len(doc_ids)
    keys = np.concatenate([np.asarray(exact, np.uint64).reshape(n, 1), bands], axis=1).view(np.int64)
    keys[~has_sig, 1:] = 0  # a document without a signature has no bands
    home = index.shard_of(np.asarray(exact, np.uint64).reshape(n))
    shards = index.shards
    with every_shard(shards) as cursors:
        nums = []
        for cur in cursors:
            cur.execute("DELETE FROM dedup_attempts WHERE attempt = %s", (attempt,))
            cur.execute(
                "INSERT INTO dedup_attempts (attempt, batch_id, by_manifest) VALUES (%s, %s, %s) RETURNING num",
                (attempt, batch_id, by_manifest),
            )
            nums.append(cur.fetchone()[0])
        if n == 0:
            return {}
        owners: dict[tuple[int, int], reserving.Owner] = {}
        pending_on: dict[str, set[int]] = {}
        for s, (shard, cur) in enumerate(zip(shards, cursors)):
            for key, owner in reserving.owners_of(shard, cur, keys).items():
                owners.setdefault(key, owner)  # one owner per key across shards (see `publish_all`)
                if owner.state == "pending":
                    pending_on.setdefault(owner.attempt, set()).add(s)
        try:
            late, handover = reserving.decide(batch_id, keys, sigs, has_sig, owners, near_threshold)
        except reserving.Blocked as blocked:
            raise Blocked({(s, a) for a in blocked.pending for s in pending_on[a]}) from None
        kept = [i for i in range(n) if i not in late]
        if not kept:
            return late
        owned = dict(zip(kept, reserving.own_keys(keys, kept, owners)))
        for s, (shard, cur) in enumerate(zip(shards, cursors)):
            mine = [i for i in kept if home[i] == s]
            insert_rows(
                shard, cur, nums[s], mine, owned, doc_ids, sigs, has_sig, [h for h in handover if home[h[2]] == s]
            )
    return late


def insert_rows(shard, cur, num, rows, owned, doc_ids, sigs, has_sig, handover) -> None:
    """Insert one shard's kept documents (`rows` of the batch) under the attempt `num`, and their handovers."""
    if not rows:
        return
    cur.execute("SELECT nextval(pg_get_serial_sequence('dedup_kept', 'id')) FROM generate_series(1, %s)", (len(rows),))
    ids = dict(zip(rows, (row[0] for row in cur.fetchall())))
    cols = schema.key_columns(shard.num_bands)
    reserving.copy_rows(
        shard,
        cur,
        "dedup_kept",
        f"id, {', '.join(cols)}, attempt, doc_id, signature",
        (
            f"{ids[i]}\t"
            + "\t".join(str(k) if k else "\\N" for k in owned[i])
            + f"\t{num}\t{copy_text(doc_ids[i])}\t"
            + (f"\\\\x{sigs[i].tobytes().hex()}" if has_sig[i] else "\\N")
            + "\n"
            for i in rows
        ),
    )
    if handover:
        reserving.copy_rows(
            shard,
            cur,
            "dedup_handover",
            "attempt, col, key, doc",
            (f"{num}\t{c}\t{k}\t{ids[i]}\n" for c, k, i in handover),
        )


def publish_all(shards, attempt: str) -> None:
    """Publish `attempt` on every shard in one transaction each (see the module's docstring); raises
    `AttemptLostError`, before anything is written, when a shard no longer holds the attempt."""
    with every_shard(shards) as cursors:
        found = []
        for cur in cursors:
            cur.execute("SELECT num, batch_id, state FROM dedup_attempts WHERE attempt = %s FOR UPDATE", (attempt,))
            found.append(cur.fetchone())
        lost = [s for s, row in enumerate(found) if row is None]
        if lost:
            raise AttemptLostError(f"dedup index: attempt {attempt} is gone from shard(s) {lost} (judged dead)")
        for cur, (num, batch_id, state) in zip(cursors, found):
            if state != "published":  # the earlier publication leaves every shard before any key is handed over
                cur.execute(
                    "DELETE FROM dedup_attempts WHERE batch_id = %s AND num <> %s AND state = 'published'",
                    (batch_id, num),
                )
        give_up_taken_handovers(shards, cursors, [row[0] for row in found])
        for cur in cursors:
            attempts.publish_rows(cur, attempt)


def give_up_taken_handovers(shards, cursors, nums: list[int]) -> None:
    """Drop the handovers of a shard whose key a row of another shard holds (the earlier owner was gone before,
    and another batch's document took the key): on one server `publish_rows` checks that itself."""
    for s, (cur, num) in enumerate(zip(cursors, nums)):
        cur.execute("SELECT col, array_agg(key) FROM dedup_handover WHERE attempt = %s GROUP BY col", (num,))
        wanted = cur.fetchall()
        for col, keys in wanted:
            column = schema.key_columns(shards[s].num_bands)[col]
            taken: set[int] = set()
            for t, other in enumerate(cursors):
                if t != s:
                    other.execute(f"SELECT {column} FROM dedup_kept WHERE {column} = ANY(%s)", (keys,))
                    taken.update(row[0] for row in other.fetchall())
            if taken:
                cur.execute(
                    "DELETE FROM dedup_handover WHERE attempt = %s AND col = %s AND key = ANY(%s)",
                    (num, col, sorted(taken)),
                )
