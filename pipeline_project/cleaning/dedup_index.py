"""Cross-batch dedup index: exact content hashes, MinHash band hashes and signatures of every kept document.

Stored as sorted numpy arrays (key -> entry number) so that lookups are one vectorized searchsorted per
batch and memory is a few hundred bytes per document (see `stats`). Serialized with `to_bytes` for S3.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass

import numpy as np
import zstandard

from pipeline_project.cleaning.errors import IndexFormatError

_FORMAT = 1


@dataclass(frozen=True)
class IndexEntry:
    batch_id: str
    doc_id: str

    def __str__(self) -> str:
        return f"{self.batch_id}/{self.doc_id}"


def _sorted(keys: np.ndarray, entries: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(keys, kind="stable")
    return keys[order], entries[order]


def _lookup(sorted_keys: np.ndarray, entries: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """Entry number of each query key, or -1."""
    if sorted_keys.size == 0 or queries.size == 0:
        return np.full(queries.shape, -1, dtype=np.int64)
    pos = np.searchsorted(sorted_keys, queries)
    pos_c = np.minimum(pos, sorted_keys.size - 1)
    hit = sorted_keys[pos_c] == queries
    return np.where(hit, entries[pos_c].astype(np.int64), -1)


class DedupIndex:
    def __init__(self, num_perm: int = 112, num_bands: int = 14):
        self.num_perm = num_perm
        self.num_bands = num_bands
        self.batches: list[str] = []
        self.doc_ids: list[str] = []
        self.doc_batch = np.zeros(0, dtype=np.uint32)
        self.exact_keys = np.zeros(0, dtype=np.uint64)
        self.exact_entries = np.zeros(0, dtype=np.uint32)
        self.band_keys = np.zeros(0, dtype=np.uint64)
        self.band_entries = np.zeros(0, dtype=np.uint32)
        self.signatures = np.zeros((0, num_perm), dtype=np.uint32)
        self._pending: dict[str, tuple] = {}  # reserved attempts, not yet published

    def __len__(self) -> int:
        return len(self.doc_ids)

    def close(self) -> None:
        """Nothing to release (the database-backed index closes its connection)."""

    def begin_batch(self, batch_id: str) -> None:
        """A re-run of a batch replaces its own entries: forget them before looking anything up."""
        self.drop_batch(batch_id)

    def signature(self, number: int) -> np.ndarray:
        return self.signatures[int(number)]

    def commit_batch(self, batch_id, doc_ids, exact_keys, band_keys, signatures, near_threshold: float) -> dict:
        """Add (or, for a re-run, replace) a batch's kept documents. In memory there is one writer, so no document
        is ever taken first."""
        self.drop_batch(batch_id)
        self.add(batch_id, list(doc_ids), exact_keys, band_keys, signatures)
        return {}

    def reserve_batch(self, batch_id, attempt, doc_ids, exact_keys, band_keys, signatures, near_threshold) -> dict:
        """Hold a batch's kept documents back until `publish(attempt)` (the PostgreSQL index's protocol)."""
        self._pending[attempt] = (batch_id, list(doc_ids), exact_keys, band_keys, signatures)
        return {}

    def confirm(self, attempt: str) -> None:
        """One process holds the in-memory index: a reserved attempt stays reserved."""

    def publish(self, attempt: str) -> None:
        if attempt in self._pending:
            self.commit_batch(*self._pending.pop(attempt), near_threshold=1.0)

    def abandon(self, attempt: str) -> None:
        self._pending.pop(attempt, None)

    def entry(self, number: int) -> IndexEntry:
        return IndexEntry(self.batches[int(self.doc_batch[number])], self.doc_ids[number])

    def lookup_exact(self, keys: np.ndarray) -> np.ndarray:
        return _lookup(self.exact_keys, self.exact_entries, np.asarray(keys, dtype=np.uint64))

    def lookup_bands(self, band_keys: np.ndarray) -> np.ndarray:
        """band_keys: (docs, bands) -> (docs, bands) entry numbers or -1."""
        keys = np.asarray(band_keys, dtype=np.uint64)
        return _lookup(self.band_keys, self.band_entries, keys.ravel()).reshape(keys.shape)

    def add(
        self,
        batch_id: str,
        doc_ids: list[str],
        exact_keys: np.ndarray | None,
        band_keys: np.ndarray | None,
        signatures: np.ndarray | None,
    ) -> None:
        """Append kept documents of a batch (a streamed batch adds one chunk at a time, so earlier chunks stay);
        rows without a MinHash signature carry all-zero bands and are skipped."""
        if not doc_ids:
            return
        if batch_id not in self.batches:
            self.batches.append(batch_id)
        b = self.batches.index(batch_id)
        start = len(self.doc_ids)
        numbers = np.arange(start, start + len(doc_ids), dtype=np.uint32)
        self.doc_ids.extend(doc_ids)
        self.doc_batch = np.concatenate([self.doc_batch, np.full(len(doc_ids), b, dtype=np.uint32)])
        if exact_keys is None:
            exact_keys = np.zeros(len(doc_ids), dtype=np.uint64)
        self.exact_keys, self.exact_entries = _sorted(
            np.concatenate([self.exact_keys, np.asarray(exact_keys, dtype=np.uint64)]),
            np.concatenate([self.exact_entries, numbers]),
        )
        if signatures is None:
            signatures = np.zeros((len(doc_ids), self.num_perm), dtype=np.uint32)
            band_keys = np.zeros((len(doc_ids), self.num_bands), dtype=np.uint64)
        self.signatures = np.concatenate([self.signatures, np.asarray(signatures, dtype=np.uint32)])
        band_keys = np.asarray(band_keys, dtype=np.uint64)
        valid = (band_keys != 0).any(axis=1)
        new_keys = band_keys[valid].ravel()
        new_entries = np.repeat(numbers[valid], self.num_bands)
        self.band_keys, self.band_entries = _sorted(
            np.concatenate([self.band_keys, new_keys]), np.concatenate([self.band_entries, new_entries])
        )

    def drop_batch(self, batch_id: str) -> None:
        """Forget a batch (a re-run of the same batch must not find itself)."""
        if batch_id not in self.batches:
            return
        b = self.batches.index(batch_id)
        keep = self.doc_batch != b
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
        array_bytes = sum(a.nbytes for a in arrays)
        id_bytes = sum(len(d) + 49 for d in self.doc_ids)  # CPython str header is ~49 bytes
        entries = len(self.doc_ids)
        return {
            "entries": entries,
            "batches": len(self.batches),
            "bytes": array_bytes + id_bytes,
            "bytes_per_doc": round((array_bytes + id_bytes) / entries, 1) if entries else 0.0,
        }

    def to_bytes(self) -> bytes:
        buf = io.BytesIO()
        meta = {
            "format": _FORMAT,
            "num_perm": self.num_perm,
            "num_bands": self.num_bands,
            "batches": self.batches,
            "doc_ids": self.doc_ids,
        }
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
    def from_bytes(cls, data: bytes) -> DedupIndex:
        raw = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data)).read()
        with np.load(io.BytesIO(raw), allow_pickle=False) as z:
            meta = json.loads(z["meta"].tobytes().decode("utf-8"))
            if meta["format"] != _FORMAT:
                raise IndexFormatError(f"unknown DedupIndex format {meta['format']}")
            index = cls(num_perm=meta["num_perm"], num_bands=meta["num_bands"])
            index.batches, index.doc_ids = meta["batches"], meta["doc_ids"]
            for name in ("doc_batch", "exact_keys", "exact_entries", "band_keys", "band_entries", "signatures"):
                setattr(index, name, z[name])
        return index


class ChainedIndex:
    """Two indexes looked up as one: `earlier` (other batches; may be None) and `local` (earlier chunks of this batch).

    Entry numbers of `local` are offset by LOCAL_OFFSET so both can be told apart. `begin_batch` reaches only
    `earlier`: the local index holds this very batch's earlier chunks, which must stay visible.
    """

    LOCAL_OFFSET = 1 << 62

    def __init__(self, earlier, local: DedupIndex):
        self.earlier = earlier
        self.local = local
        self.num_perm = local.num_perm
        self.num_bands = local.num_bands
        self._begun = False

    def begin_batch(self, batch_id: str) -> None:
        if self.earlier is not None and not self._begun:
            self.earlier.begin_batch(batch_id)
        self._begun = True

    def lookup_exact(self, keys: np.ndarray) -> np.ndarray:
        local = self.local.lookup_exact(keys)
        local = np.where(local >= 0, local + self.LOCAL_OFFSET, -1)
        if self.earlier is None:
            return local
        earlier = self.earlier.lookup_exact(keys)
        return np.where(earlier >= 0, earlier, local)

    def lookup_bands(self, band_keys: np.ndarray) -> np.ndarray:
        """(docs, bands) -> (docs, 2 * bands): the earlier index's hits, then the local ones."""
        local = self.local.lookup_bands(band_keys)
        local = np.where(local >= 0, local + self.LOCAL_OFFSET, -1)
        if self.earlier is None:
            return local
        return np.concatenate([self.earlier.lookup_bands(band_keys), local], axis=1)

    def entry(self, number: int) -> IndexEntry:
        if number >= self.LOCAL_OFFSET:
            return self.local.entry(number - self.LOCAL_OFFSET)
        return self.earlier.entry(number)

    def signature(self, number: int) -> np.ndarray:
        if number >= self.LOCAL_OFFSET:
            return self.local.signature(number - self.LOCAL_OFFSET)
        return self.earlier.signature(number)
