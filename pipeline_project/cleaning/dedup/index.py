"""The dedup index's contract: what the dedup steps look up (`DedupLookup`), and what the cross-batch index adds
to it (`DedupIndex`): first-writer-wins inserts through attempts that are reserved, confirmed, then published or
abandoned, and the duplicate-cluster counts of the documents it keeps.

Implementations: `postgres.PostgresDedupIndex` (the deployed one, many writers), `sharded.ShardedDedupIndex` (the
same over several PostgreSQL servers, documents placed by exact-key hash), `memory.MemoryDedupIndex` (one
process, for tests and small runs); `local.LocalIndex` and `local.ChainedIndex` look up a batch's earlier chunks,
chained with the cross-batch index.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np


@dataclass(frozen=True)
class IndexEntry:
    batch_id: str
    doc_id: str

    def __str__(self) -> str:
        return f"{self.batch_id}/{self.doc_id}"


class DedupLookup(Protocol):
    """Lookups by exact key and MinHash band, as entry numbers (-1: none); the entry and signature of a number."""

    def begin_batch(self, batch_id: str) -> None:
        """A re-run of `batch_id` replaces its own entries: they are not looked up."""

    def lookup_exact(self, keys: np.ndarray) -> np.ndarray: ...

    def lookup_bands(self, band_keys: np.ndarray) -> np.ndarray: ...

    def entry(self, number: int) -> IndexEntry: ...

    def signature(self, number: int) -> np.ndarray: ...


# called between reserve and publish with (the attempt, {row: reason} of the rows another batch published first)
BeforePublish = Callable[[str, dict[int, str]], None]


class DedupIndex(DedupLookup, Protocol):
    """The cross-batch index. Every insert returns {row: reason} of the rows that a published document of another
    batch holds already (first writer wins); those rows are dropped late by the caller."""

    def commit_batch(
        self,
        batch_id: str,
        doc_ids: Sequence[str],
        exact_keys: np.ndarray,
        band_keys: np.ndarray,
        signatures: np.ndarray,
        near_threshold: float,
        before_publish: BeforePublish | None = None,
    ) -> dict[int, str]:
        """Reserve and publish at once (no manifest names the attempt)."""

    def reserve_batch(
        self,
        batch_id: str,
        attempt: str,
        doc_ids: Sequence[str],
        exact_keys: np.ndarray,
        band_keys: np.ndarray,
        signatures: np.ndarray,
        near_threshold: float,
    ) -> dict[int, str]:
        """Insert the batch's kept documents as the pending `attempt`; lookups ignore them until it is published."""

    def confirm(self, attempt: str) -> None:
        """The attempt is still this writer's, right before the manifest that names it is written."""

    def publish(self, attempt: str) -> None:
        """Make the attempt's rows visible (replacing the batch's earlier publication)."""

    def abandon(self, attempt: str) -> None:
        """Remove the attempt's rows, unless a manifest already names it (then it is published)."""

    def batch_copies(self, batch_id: str, attempt: str, copies: Counter, kept: list[str]) -> dict[str, tuple[int, int]]:
        """Record the attempt's duplicates {(target, kind): n}; the kept documents' copy counts {doc_id: (exact,
        near)} over the published batches and this attempt."""

    def close(self) -> None: ...


def reserve_and_publish(
    index: DedupIndex,
    batch_id: str,
    doc_ids: Sequence[str],
    exact_keys: np.ndarray,
    band_keys: np.ndarray,
    signatures: np.ndarray,
    near_threshold: float,
    before_publish: BeforePublish | None = None,
) -> dict[int, str]:
    """`commit_batch` for a PostgreSQL index or its shards: reserve a fresh attempt that no manifest will name, run
    `before_publish(attempt, late)` (copy counts), then publish it; returns the late drops."""
    attempt = f"{batch_id}:{uuid.uuid4().hex[:12]}"
    late = index.reserve_batch(  # type: ignore[call-arg]  # the PostgreSQL indexes take `by_manifest`
        batch_id, attempt, doc_ids, exact_keys, band_keys, signatures, near_threshold, by_manifest=False
    )
    if before_publish is not None:
        before_publish(attempt, late)
    index.publish(attempt)
    return late
