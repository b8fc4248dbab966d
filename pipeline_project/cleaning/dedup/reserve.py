"""Reserving one attempt's documents in the PostgreSQL dedup index: one transaction, first writer wins.

`reserve_once` inserts the attempt's documents and keys; a key another attempt holds is decided by its owner:
a published document of another batch makes a late drop (exact, or near by signature estimate), one of the same
batch is handed over at publish, and a pending one raises `Blocked` (the transaction rolls back; the caller waits
on that attempt and tries again, so no transaction that holds inserted rows ever waits on an attempt).
"""

from __future__ import annotations

import io
from collections.abc import Iterator

import numpy as np

from pipeline_project.cleaning.dedup.traffic import copy_text, row_bytes, signed


class Blocked(Exception):
    """Keys of this reserve are held by pending attempts of other batches (to wait on, then try again)."""

    def __init__(self, pending: set[str]):
        super().__init__(sorted(pending))
        self.pending = pending


def rows_of(index, doc_ids, exact_keys, band_keys, signatures):
    n = len(doc_ids)
    bands = np.asarray(band_keys, dtype=np.uint64).reshape(n, index.num_bands)
    sigs = np.ascontiguousarray(signatures, dtype=np.uint32).reshape(n, index.num_perm)
    return np.asarray(exact_keys, dtype=np.uint64), bands, sigs, (bands != 0).any(axis=1)


def reserve_once(index, batch_id, attempt, doc_ids, exact, bands, sigs, has_sig, near_threshold, by_manifest):
    n = len(doc_ids)
    late: dict[int, str] = {}
    with index.cursor() as cur:
        cur.execute("DELETE FROM dedup_attempts WHERE attempt = %s", (attempt,))
        cur.execute(
            "INSERT INTO dedup_attempts (attempt, batch_id, by_manifest) VALUES (%s, %s, %s)",
            (attempt, batch_id, by_manifest),
        )
        if n == 0:
            return late
        cur.execute("SELECT nextval(pg_get_serial_sequence('dedup_docs', 'id')) FROM generate_series(1, %s)", (n,))
        ids = [row[0] for row in cur.fetchall()]
        copy_rows(
            index,
            cur,
            "dedup_docs",
            "id, attempt, batch_id, doc_id, exact_key, signature",
            (
                f"{ids[i]}\t{copy_text(attempt)}\t{copy_text(batch_id)}\t{copy_text(doc_ids[i])}\t{k}\t"
                + (f"\\\\x{sigs[i].tobytes().hex()}" if has_sig[i] else "\\N")
                + "\n"
                for i, k in enumerate(signed(exact))
            ),
        )
        owner_of = dict(zip(ids, range(n)))
        handover: list[tuple[str, int, int]] = []
        exact_rows = sorted((k, ids[i]) for i, k in enumerate(signed(exact)) if k != 0)
        for (key, doc), owner in taken(index, cur, "dedup_exact", exact_rows, attempt):
            if owner[0] == batch_id:
                handover.append(("exact", key, doc))
            else:
                late[owner_of[doc]] = f"exact_duplicate_of:{owner[0]}/{owner[1]}"
        band_rows = sorted(
            (k, ids[i]) for i in np.flatnonzero(has_sig).tolist() if i not in late for k in signed(bands[i])
        )
        for (key, doc), owner in taken(index, cur, "dedup_bands", band_rows, attempt):
            i = owner_of[doc]
            if i in late:
                continue
            if owner[0] == batch_id:
                handover.append(("bands", key, doc))
                continue
            estimate = float(np.mean(sigs[i] == np.frombuffer(owner[2], dtype=np.uint32))) if owner[2] else 0.0
            if estimate >= near_threshold:
                late[i] = f"near_duplicate_of:{owner[0]}/{owner[1]}"
        if handover:
            copy_rows(
                index,
                cur,
                "dedup_handover",
                "attempt, kind, key, doc",
                (f"{copy_text(attempt)}\t{kind}\t{k}\t{d}\n" for kind, k, d in handover),
            )
        if late:
            cur.execute("DELETE FROM dedup_docs WHERE id = ANY(%s)", ([ids[i] for i in late],))
    return late


def taken(index, cur, table: str, rows: list[tuple[int, int]], attempt: str) -> list:
    """Insert (key, doc) rows; ((key, doc), (owner batch, owner doc id, owner signature)) for each key that a
    published document of another attempt holds. Raises `_Blocked` for keys that pending attempts hold."""
    if not rows:
        return []
    cur.execute(f"CREATE TEMP TABLE IF NOT EXISTS incoming_{table} (key BIGINT, doc BIGINT) ON COMMIT DROP")
    cur.execute(f"TRUNCATE incoming_{table}")
    copy_rows(index, cur, f"incoming_{table}", "key, doc", (f"{k}\t{d}\n" for k, d in rows))
    cur.execute(
        f"INSERT INTO {table} (key, doc) SELECT key, doc FROM incoming_{table} ORDER BY key "
        "ON CONFLICT (key) DO NOTHING RETURNING key"
    )
    inserted = {row[0] for row in cur.fetchall()}
    taken = [(k, d) for k, d in rows if k not in inserted]
    if not taken:
        return []
    cur.execute(
        f"SELECT t.key, d.batch_id, d.doc_id, d.signature, a.attempt, a.state FROM {table} t "
        "JOIN dedup_docs d ON d.id = t.doc JOIN dedup_attempts a ON a.attempt = d.attempt WHERE t.key = ANY(%s)",
        ([k for k, _ in taken],),
    )
    owners = {}
    pending = set()
    for key, batch, doc_id, sig, owner_attempt, state in cur.fetchall():
        if owner_attempt == attempt:
            continue  # a band this attempt's own earlier document took: it stays that document's
        if state == "pending":
            pending.add(owner_attempt)
        owners[key] = (batch, doc_id, bytes(sig) if sig is not None else None)
        index.traffic.rows_read += 1
        index.traffic.bytes_read += row_bytes(*owners[key])
    if pending:
        raise Blocked(pending)
    return [((k, d), owners[k]) for k, d in taken if k in owners]


def copy_rows(index, cur, table: str, columns: str, rows: Iterator[str]) -> None:
    text = "".join(rows)
    cur.copy_expert(f"COPY {table} ({columns}) FROM STDIN", io.StringIO(text))
    index.traffic.rows_written += text.count("\n")
    index.traffic.bytes_written += len(text)
