"""The takedown blocklist: texts that takedown requests keep out of the corpus, in a table beside the dedup index.

An entry holds one text's exact key, MinHash signature and band keys (as the dedup steps compute them), the request
that put it there and where the keys were taken from (`origin`: "text", "<batch>/<doc>"). The cleaning consults it
(`steps.blocked.Blocked`, right before exact dedup): a document whose exact key is on it, or that shares a band key
with an entry and whose signature estimate reaches `signature_threshold` (the rule for near duplicates of earlier
batches), is dropped with the reason `blocked:<request>`. Entries are only ever added, keyed by (request, origin),
so writing a request's entries again changes nothing.

`Blocklist` is the contract; `MemoryBlocklist` the stand-in (one process, tests), `PostgresBlocklist` the deployed
one, in the dedup index's schema (table `takedown_blocklist`, GIN-indexed band keys).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from pipeline_project.cleaning.dedup.traffic import first_line
from pipeline_project.cleaning.errors import CleaningError
from pipeline_project.common.postgres import connect_kwargs


@dataclass(frozen=True)
class BlockEntry:
    request: str
    origin: str
    exact: int  # 0: none (a text with no exact key)
    signature: np.ndarray | None = None  # uint32; None: too short for a shingle
    bands: np.ndarray | None = None  # uint64, from the signature

    def band_set(self) -> set[int]:
        return set() if self.bands is None else {int(b) for b in self.bands.tolist() if b}


class Blocklist(Protocol):
    """What the cleaning asks (`match`) and a takedown writes (`add`)."""

    def match(
        self, exact: np.ndarray, bands: np.ndarray, signatures: Sequence[np.ndarray | None], threshold: float
    ) -> list[str | None]:
        """Per document: the request that blocks it, or None. `exact` (n,) uint64 keys (0: none), `bands` (n,
        bands) uint64 (0: none), `signatures` their MinHash values; `threshold`: the lowest signature estimate."""

    def add(self, entries: Sequence[BlockEntry]) -> int:
        """Add the entries not there yet; returns how many were added."""

    def close(self) -> None: ...


def first_match(
    exact: int, bands: Iterable[int], signature: np.ndarray | None, candidates: Iterable[BlockEntry], threshold: float
) -> str | None:
    """The request of the entry that blocks one document: an equal exact key first, else the entry sharing a band
    whose signature estimate is highest and at least `threshold` (ties: the first request by name)."""
    wanted = {int(b) for b in bands if b}
    ordered = sorted(candidates, key=lambda e: (e.request, e.origin))
    for entry in ordered:
        if exact and entry.exact == exact:
            return entry.request
    best: tuple[float, str] | None = None
    for entry in ordered:
        if signature is None or entry.signature is None or not wanted & entry.band_set():
            continue
        estimate = float(np.mean(np.asarray(signature, dtype=np.uint32) == entry.signature))
        if estimate >= threshold and (best is None or estimate > best[0]):
            best = (estimate, entry.request)
    return None if best is None else best[1]


class MemoryBlocklist:
    def __init__(self, entries: Iterable[BlockEntry] = ()) -> None:
        self.entries: dict[tuple[str, str], BlockEntry] = {}
        self.add(list(entries))

    def add(self, entries: Sequence[BlockEntry]) -> int:
        new = {(e.request, e.origin): e for e in entries if (e.request, e.origin) not in self.entries}
        self.entries.update(new)
        return len(new)

    def match(self, exact, bands, signatures, threshold: float) -> list[str | None]:
        every = list(self.entries.values())
        return [
            first_match(int(k), row.tolist(), sig, every, threshold)
            for k, row, sig in zip(np.asarray(exact).tolist(), np.asarray(bands), signatures)
        ]

    def close(self) -> None:
        pass


class BlocklistUnavailableError(CleaningError):
    """The blocklist's database cannot be reached or answered with an error."""


def _signed(values: Iterable[int]) -> list[int]:
    """uint64 keys as PostgreSQL BIGINT (the dedup index stores them the same way); zeros left out."""
    keys = np.fromiter((int(v) for v in values if v), dtype=np.uint64)
    return sorted(set(keys.view(np.int64).tolist()))


def _unsigned(value: int | None) -> int:
    return 0 if value is None else int(np.array([value], dtype=np.int64).view(np.uint64)[0])


class PostgresBlocklist:
    """`takedown_blocklist` in the PostgreSQL schema `schema` (the dedup index's: one per deployment). Connects on
    first use; each call is one transaction."""

    def __init__(self, url: str, schema: str = "dedup", connect_timeout_s: int = 10) -> None:
        if not schema.replace("_", "").isalnum():
            raise CleaningError(f"blocklist schema {schema!r}: letters, digits and _ only")
        self.url, self.schema, self.connect_timeout_s = url, schema, connect_timeout_s
        self.table = f"{schema}.takedown_blocklist"
        self._conn = None

    def _run(self, sql: str, args: tuple = (), rows: list[tuple] | None = None) -> list[tuple]:
        """One statement in one transaction (with `rows`: `execute_values`); its rows. Errors: one line."""
        import psycopg2
        from psycopg2.extras import execute_values

        try:
            conn = self._connect()
            with conn, conn.cursor() as cur:
                if rows is not None:
                    return execute_values(cur, sql, rows, fetch=True)
                cur.execute(sql, args)
                return cur.fetchall() if cur.description else []
        except psycopg2.Error as exc:
            self.close()
            raise BlocklistUnavailableError(f"takedown blocklist database failed: {first_line(exc)}") from None

    def _connect(self):
        import psycopg2

        if self._conn is None or self._conn.closed:
            self._conn = psycopg2.connect(self.url, **connect_kwargs(self.connect_timeout_s))
            with self._conn, self._conn.cursor() as cur:
                cur.execute("SELECT pg_advisory_xact_lock(hashtext('pipeline_project.dedup_schema'))")
                cur.execute(
                    f"CREATE SCHEMA IF NOT EXISTS {self.schema};"
                    f"CREATE TABLE IF NOT EXISTS {self.table} (request TEXT NOT NULL, origin TEXT NOT NULL, "
                    "exact BIGINT, bands BIGINT[] NOT NULL, signature BYTEA, "
                    "created_at TIMESTAMPTZ NOT NULL DEFAULT now(), PRIMARY KEY (request, origin));"
                    f"CREATE INDEX IF NOT EXISTS takedown_blocklist_exact ON {self.table} (exact);"
                    f"CREATE INDEX IF NOT EXISTS takedown_blocklist_bands ON {self.table} USING gin (bands);"
                )
        return self._conn

    def add(self, entries: Sequence[BlockEntry]) -> int:
        rows = [
            (
                e.request,
                e.origin,
                _signed([e.exact])[0] if e.exact else None,
                _signed(e.band_set()),
                None if e.signature is None else np.asarray(e.signature, dtype=np.uint32).tobytes(),
            )
            for e in entries
        ]
        if not rows:
            return 0
        sql = (
            f"INSERT INTO {self.table} (request, origin, exact, bands, signature) VALUES %s "
            "ON CONFLICT (request, origin) DO NOTHING RETURNING 1"
        )
        return len(self._run(sql, rows=rows))

    def match(self, exact, bands, signatures, threshold: float) -> list[str | None]:
        exact = np.asarray(exact, dtype=np.uint64)
        if len(exact) == 0:
            return []
        bands = np.asarray(bands, dtype=np.uint64).reshape(len(exact), -1)
        found = self._run(
            f"SELECT request, origin, exact, bands, signature FROM {self.table} "
            "WHERE exact = ANY(%s::bigint[]) OR bands && %s::bigint[]",
            (_signed(exact.tolist()), _signed(bands.ravel().tolist())),
        )
        if not found:
            return [None] * len(exact)
        entries = [
            BlockEntry(
                request,
                origin,
                _unsigned(key),
                None if sig is None else np.frombuffer(bytes(sig), dtype=np.uint32),
                np.array([_unsigned(b) for b in held], dtype=np.uint64),
            )
            for request, origin, key, held, sig in found
        ]
        return MemoryBlocklist(entries).match(exact, bands, signatures, threshold)

    def requests(self) -> dict[str, int]:
        """{request: entries} of everything on the list."""
        found = self._run(f"SELECT request, count(*) FROM {self.table} GROUP BY request ORDER BY request")
        return {request: int(n) for request, n in found}

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
