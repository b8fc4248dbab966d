"""The streaming cleaner's in-memory index of a batch's earlier chunks, and its lookups chained with the cross-batch one.

`LocalIndex` holds exact content hashes, MinHash band hashes and signatures of the kept documents as sorted numpy
arrays (key -> entry number), so that a lookup is one vectorized searchsorted per chunk and memory is a few hundred
bytes per document. The cross-batch index is a `index.DedupIndex` (`postgres.PostgresDedupIndex`); `ChainedIndex` looks both up as one.
`LocalIndex.from_bytes` reads the index file that earlier versions kept in S3 (`pipeline-project dedup-import`).
"""

from __future__ import annotations

import io
import json

import numpy as np
import zstandard

from pipeline_project.cleaning.dedup.index import DedupLookup, IndexEntry
from pipeline_project.cleaning.errors import IndexFormatError

FILE_FORMAT = 1


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


class LocalIndex:
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

    def __len__(self) -> int:
        return len(self.doc_ids)

    def signature(self, number: int) -> np.ndarray:
        return self.signatures[int(number)]

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

    @classmethod
    def from_bytes(cls, data: bytes) -> LocalIndex:
        """The index file that earlier versions stored in S3 (`dedup/index.bin`), for the migration."""
        raw = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data)).read()
        with np.load(io.BytesIO(raw), allow_pickle=False) as z:
            meta = json.loads(z["meta"].tobytes().decode("utf-8"))
            if meta["format"] != FILE_FORMAT:
                raise IndexFormatError(f"unknown dedup index file format {meta['format']}")
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

    def __init__(self, earlier: DedupLookup | None, local: LocalIndex):
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
