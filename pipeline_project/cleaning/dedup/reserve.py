"""Reserving one attempt's documents in the PostgreSQL dedup index: one transaction, first writer wins.

`reserve_once`, holding the writers' lock (`schema.KEYS_LOCK`), reads the owners of the attempt's keys, then
inserts the kept documents with the keys they come to own; a key another attempt holds is decided by its owner:
a published document of another batch makes a late drop (exact, or near by signature estimate), one of the same
batch is handed over at publish, and a pending one raises `Blocked` (the transaction rolls back; the caller waits
on that attempt and tries again, so no transaction that holds inserted rows ever waits on an attempt). A late
document is never inserted. Within the attempt, a key two kept documents share is the first one's.
"""

from __future__ import annotations

import io
from collections.abc import Iterable
from typing import NamedTuple

import numpy as np

from pipeline_project.cleaning.dedup import schema
from pipeline_project.cleaning.dedup.traffic import copy_text, row_bytes


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
    keys = np.concatenate([np.asarray(exact, np.uint64).reshape(n, 1), bands], axis=1).view(np.int64)
    keys[~has_sig, 1:] = 0  # a document without a signature has no bands
    with index.cursor() as cur:
        cur.execute("SELECT pg_advisory_xact_lock(%s)", (schema.KEYS_LOCK,))
        cur.execute("DELETE FROM dedup_attempts WHERE attempt = %s", (attempt,))
        cur.execute(
            "INSERT INTO dedup_attempts (attempt, batch_id, by_manifest) VALUES (%s, %s, %s) RETURNING num",
            (attempt, batch_id, by_manifest),
        )
        num = cur.fetchone()[0]
        if n == 0:
            return {}
        owners = owners_of(index, cur, keys)
        late, handover = decide(batch_id, keys, sigs, has_sig, owners, near_threshold)
        kept = [i for i in range(n) if i not in late]
        if not kept:
            return late
        cur.execute(
            "SELECT nextval(pg_get_serial_sequence('dedup_kept', 'id')) FROM generate_series(1, %s)", (len(kept),)
        )
        ids = dict(zip(kept, (row[0] for row in cur.fetchall())))
        owned = own_keys(keys, kept, owners)
        cols = schema.key_columns(index.num_bands)
        copy_rows(
            index,
            cur,
            "dedup_kept",
            f"id, {', '.join(cols)}, attempt, doc_id, signature",
            (
                f"{ids[i]}\t"
                + "\t".join(str(k) if k else "\\N" for k in owned[r])
                + f"\t{num}\t{copy_text(doc_ids[i])}\t"
                + (f"\\\\x{sigs[i].tobytes().hex()}" if has_sig[i] else "\\N")
                + "\n"
                for r, i in enumerate(kept)
            ),
        )
        if handover:
            copy_rows(
                index,
                cur,
                "dedup_handover",
                "attempt, col, key, doc",
                (f"{num}\t{c}\t{k}\t{ids[i]}\n" for c, k, i in handover),
            )
    return late


def decide(batch_id, keys, sigs, has_sig, owners, near_threshold) -> tuple[dict[int, str], list]:
    """({row: reason} of the late drops, [(column, key, row)] of the keys to hand over at publish); raises
    `Blocked` when a key is a pending attempt's (an exact key of any row, a band of a row not dropped by exact)."""
    late: dict[int, str] = {}
    handover: dict[tuple[int, int], list[int]] = {}  # a key shared by two kept rows passes to the first
    pending: set[str] = set()
    for i, key in enumerate(keys[:, 0].tolist()):
        owner = owners.get((0, key)) if key else None
        if owner is None:
            continue
        if owner.state == "pending":
            pending.add(owner.attempt)
        elif owner.batch == batch_id:
            handover.setdefault((0, key), []).append(i)
        else:
            late[i] = f"exact_duplicate_of:{owner.batch}/{owner.doc_id}"
    if pending:
        raise Blocked(pending)
    for i in np.flatnonzero(has_sig).tolist():
        if i in late:
            continue
        # in ascending key order, as version 2 inserted them: the first owner that passes names the drop
        for key, col in sorted((k, c) for c, k in enumerate(keys[i, 1:].tolist(), start=1)):
            owner = owners.get((col, key))
            if owner is None:
                continue
            if owner.state == "pending":
                pending.add(owner.attempt)
            elif owner.batch == batch_id:
                handover.setdefault((col, key), []).append(i)
            elif i not in late and owner.estimate(sigs[i]) >= near_threshold:
                late[i] = f"near_duplicate_of:{owner.batch}/{owner.doc_id}"
    if pending:
        raise Blocked(pending)
    firsts = ((c, k, next((i for i in rows if i not in late), None)) for (c, k), rows in handover.items())
    return late, [(c, k, i) for c, k, i in firsts if i is not None]


class Owner(NamedTuple):
    attempt: str
    batch: str
    state: str
    doc_id: str
    sig: bytes | None

    def estimate(self, sig: np.ndarray) -> float:
        """The Jaccard estimate of `sig` against this owner's signature (0 without one)."""
        return float(np.mean(sig == np.frombuffer(self.sig, dtype=np.uint32))) if self.sig else 0.0


def owners_of(index, cur, keys: np.ndarray) -> dict[tuple[int, int], Owner]:
    """{(column, key): owner} of the keys (n, 1 + bands) that a document of another attempt holds."""
    cols = schema.key_columns(index.num_bands)
    wanted = [sorted({k for k in keys[:, c].tolist() if k}) for c in range(len(cols))]
    cur.execute(
        f"SELECT a.attempt, a.batch_id, a.state, d.doc_id, d.signature, {', '.join(f'd.{c}' for c in cols)} "
        "FROM dedup_kept d JOIN dedup_attempts a ON a.num = d.attempt WHERE "
        + " OR ".join(f"d.{c} = ANY(%s)" for c in cols),
        wanted,
    )
    sets = [set(w) for w in wanted]
    owners: dict[tuple[int, int], Owner] = {}
    for attempt, batch, state, doc_id, sig, *held in cur.fetchall():
        owner = Owner(attempt, batch, state, doc_id, bytes(sig) if sig is not None else None)
        index.traffic.rows_read += 1
        index.traffic.bytes_read += row_bytes(batch, doc_id, sig)
        for c, key in enumerate(held):
            if key is not None and key in sets[c]:
                owners[(c, key)] = owner
    return owners


def own_keys(keys: np.ndarray, kept: list[int], owners: dict) -> list[list[int]]:
    """Each kept row's keys that it comes to own (0: none): those no other attempt holds, first row first."""
    claimed: list[set[int]] = [set() for _ in range(keys.shape[1])]
    out = []
    for i in kept:
        row = []
        for c, key in enumerate(keys[i].tolist()):
            if key and (c, key) not in owners and key not in claimed[c]:
                claimed[c].add(key)
                row.append(key)
            else:
                row.append(0)
        out.append(row)
    return out


def copy_rows(index, cur, table: str, columns: str, rows: Iterable[str]) -> None:
    text = "".join(rows)
    cur.copy_expert(f"COPY {table} ({columns}) FROM STDIN", io.StringIO(text))
    index.traffic.rows_written += text.count("\n")
    index.traffic.bytes_written += len(text)
