"""`MemoryDedupIndex`: the cross-batch dedup index in one process (tests, a notebook, a single-writer run)."""

from __future__ import annotations

import io
import json
from collections import Counter

import numpy as np
import zstandard

from pipeline_project.cleaning.dedup.local import FILE_FORMAT, LocalIndex


class MemoryDedupIndex(LocalIndex):
    """A `DedupIndex` in one process's memory, one writer: `LocalIndex` plus the attempts of the cross-batch protocol."""

    def __init__(self, num_perm: int = 112, num_bands: int = 14):
        super().__init__(num_perm, num_bands)
        self.pending: dict[str, tuple] = {}  # reserved attempts, not yet published

    def close(self) -> None:
        """Nothing to release."""

    def begin_batch(self, batch_id: str) -> None:
        """A re-run of a batch replaces its own entries: forget them before looking anything up."""
        self.drop_batch(batch_id)

    def commit_batch(
        self, batch_id, doc_ids, exact_keys, band_keys, signatures, near_threshold: float, before_publish=None
    ) -> dict:
        """Add (or, for a re-run, replace) a batch's kept documents; one writer, so none is ever taken first."""
        self.drop_batch(batch_id)
        self.add(batch_id, list(doc_ids), exact_keys, band_keys, signatures)
        if before_publish is not None:
            before_publish("", {})
        return {}

    def reserve_batch(self, batch_id, attempt, doc_ids, exact_keys, band_keys, signatures, near_threshold) -> dict:
        self.pending[attempt] = (batch_id, list(doc_ids), exact_keys, band_keys, signatures)
        return {}

    def confirm(self, attempt: str) -> None:
        """One process holds the index: a reserved attempt stays reserved."""

    def publish(self, attempt: str) -> None:
        if attempt in self.pending:
            self.commit_batch(*self.pending.pop(attempt), near_threshold=1.0)

    def abandon(self, attempt: str) -> None:
        self.pending.pop(attempt, None)

    def batch_copies(self, batch_id: str, attempt: str, copies: Counter, kept: list[str]) -> dict[str, tuple[int, int]]:
        """The batch's own copy counts: this index keeps none across batches."""
        return {d: (copies[(f"{batch_id}/{d}", "exact")], copies[(f"{batch_id}/{d}", "near")]) for d in kept}

    def drop_batch(self, batch_id: str) -> None:
        if batch_id not in self.batches:
            return
        keep = self.doc_batch != self.batches.index(batch_id)
        if keep.all():
            return
        renumber = np.cumsum(keep, dtype=np.int64) - 1
        self.doc_ids = [d for d, k in zip(self.doc_ids, keep.tolist()) if k]
        self.doc_batch = self.doc_batch[keep]
        self.signatures = self.signatures[keep]
        mask = keep[self.exact_entries]
        self.exact_keys = self.exact_keys[mask]
        self.exact_entries = renumber[self.exact_entries[mask]].astype(np.uint32)
        mask = keep[self.band_entries]
        self.band_keys = self.band_keys[mask]
        self.band_entries = renumber[self.band_entries[mask]].astype(np.uint32)

    @property
    def stats(self) -> dict:
        arrays = (
            self.doc_batch,
            self.exact_keys,
            self.exact_entries,
            self.band_keys,
            self.band_entries,
            self.signatures,
        )
        total = sum(a.nbytes for a in arrays) + sum(len(d) + 49 for d in self.doc_ids)  # ~49 bytes per str header
        entries = len(self.doc_ids)
        return {
            "entries": entries,
            "batches": len(self.batches),
            "bytes": total,
            "bytes_per_doc": round(total / entries, 1) if entries else 0.0,
        }

    def to_bytes(self) -> bytes:
        """The S3 index file of earlier versions (`LocalIndex.from_bytes` reads it for `dedup-import`)."""
        buf = io.BytesIO()
        meta = {"format": FILE_FORMAT, "num_perm": self.num_perm, "num_bands": self.num_bands,
                "batches": self.batches, "doc_ids": self.doc_ids}  # fmt: skip
        np.savez(
            buf,
            meta=np.frombuffer(json.dumps(meta).encode("utf-8"), dtype=np.uint8),
            doc_batch=self.doc_batch,
            exact_keys=self.exact_keys,
            exact_entries=self.exact_entries,
            band_keys=self.band_keys,
            band_entries=self.band_entries,
            signatures=self.signatures,
        )
        return zstandard.ZstdCompressor(level=3).compress(buf.getvalue())

    @classmethod
    def from_bytes(cls, data: bytes) -> MemoryDedupIndex:
        index = cls()
        index.__dict__.update(LocalIndex.from_bytes(data).__dict__)
        return index
