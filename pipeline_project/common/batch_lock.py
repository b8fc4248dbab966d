"""The per-batch exclusion: every writer of a batch's published state (its shards and manifest, its ledger entry,
its dedup rows) holds it while it reads what it is about to change and writes it.

A PostgreSQL session-level advisory lock, on a connection of its own, in a key space of its own (the two-int
form: class `BATCH_LOCK_CLASS`, then the batch's hash). The server releases it when the session ends: a process that
dies, or a host cut off (the server's keepalives, which the project sets, find the silent peer within a minute;
docs/guarantees.md). Who takes it: `cleaned_shards`, `token_blocks`, `retune --write`, `ledger retire`,
`dedup-import`.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from pipeline_project.common.postgres import connect_kwargs

BATCH_LOCK_CLASS = 0x50_42  # "PB": pg_advisory_lock(int4, int4) keys never meet the bigint form the dedup index uses


class BatchBusyError(RuntimeError):
    """Another run or command held the batch for longer than this one waits."""


@contextmanager
def batch_lock(url: str, batch_id: str, wait_s: float = 600.0) -> Iterator[None]:
    """Hold `batch_id` (`url`: the PostgreSQL database every writer of the deployment shares)."""
    import psycopg2

    conn = psycopg2.connect(url, **connect_kwargs())
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute("SET lock_timeout = %s", (f"{int(wait_s * 1000)}ms",))
            try:
                cur.execute("SELECT pg_advisory_lock(%s, hashtext(%s))", (BATCH_LOCK_CLASS, batch_id))
            except psycopg2.errors.LockNotAvailable:
                raise BatchBusyError(
                    f"batch {batch_id} is being written by another run or command (waited {wait_s:g} s); try again"
                ) from None
        yield
    finally:
        conn.close()  # ends the session, and so the lock


_LOCAL = threading.Lock()
_HELD: dict[str, threading.Lock] = {}


@contextmanager
def local_batch_lock(batch_id: str, wait_s: float = 600.0) -> Iterator[None]:
    """The same exclusion within one process (tests, a single-writer run without PostgreSQL)."""
    with _LOCAL:
        lock = _HELD.setdefault(batch_id, threading.Lock())
    if not lock.acquire(timeout=wait_s):
        raise BatchBusyError(f"batch {batch_id} is being written by another thread (waited {wait_s:g} s)")
    try:
        yield
    finally:
        lock.release()
