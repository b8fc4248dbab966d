"""Whole-batch stand-ins for tests of the cleaning chain (the product cleans through `stream.StreamingCleaner`).

- `MemoryDedupIndex`: the cross-batch index in one process (the PostgreSQL index's protocol, one writer).
- `WholeBatchPipeline`: one batch as one chunk against such an index, committing its kept documents after.
- `publish_batch` / `exclusion_records`: a whole result written as the asset writes a streamed one.
"""

from __future__ import annotations

import io
import json
import time
from collections.abc import Iterable

import numpy as np
import zstandard

from pipeline_project.cleaning.chain.chain import CleaningPipeline, CleaningResult
from pipeline_project.cleaning.config import CleaningConfig
from pipeline_project.cleaning.dedup.local import FILE_FORMAT, LocalIndex
from pipeline_project.cleaning.output.publish import (
    EXCLUSIONS_NAME,
    PublishedBatch,
    ShardEntry,
    ShardManifest,
    exclusion_records_of,
    write_manifest,
)
from pipeline_project.cleaning.output.writer import BatchWriter
from pipeline_project.cleaning.records import DocState, Document, Dropped, Quarantined
from pipeline_project.cleaning.steps import StepStats
from pipeline_project.cleaning.steps.dedup import signature_threshold


class MemoryDedupIndex(LocalIndex):
    """`LocalIndex` plus the cross-batch protocol of `dedup_store.PostgresDedupIndex`, in memory, one writer."""

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


class WholeBatchPipeline(CleaningPipeline):
    """One batch cleaned as one chunk, looked up in `index` and (with `commit=True`) committed to it after."""

    def run(
        self,
        items: Iterable[Document | Quarantined],
        batch_id: str,
        index: MemoryDedupIndex | None = None,
        commit: bool = True,
    ) -> CleaningResult:
        lookups = index if self.config.dedup.scope == "global" else None
        result = self.finish(self.start(items, batch_id), lookups)
        return self.commit(result, lookups) if commit else result

    def commit(self, result: CleaningResult, index) -> CleaningResult:
        """Write the kept documents to `index`; those another batch committed first move to `dropped`."""
        if index is not None:
            docs = result.kept
            exact = np.array([d.state.exact_key or 0 for d in docs], dtype=np.uint64)
            sigs = np.zeros((len(docs), index.num_perm), dtype=np.uint32)
            bands = np.zeros((len(docs), index.num_bands), dtype=np.uint64)
            for i, d in enumerate(docs):
                if d.state.minhash is not None:
                    sigs[i], bands[i] = d.state.minhash
            start = time.perf_counter()
            threshold = signature_threshold(self.config.dedup.minhash)
            late = index.commit_batch(result.batch_id, [d.id for d in docs], exact, bands, sigs, threshold)
            self._count_commit(result, docs, late, time.perf_counter() - start)
        for doc in result.kept:
            doc.state = DocState()
        result.update_counts(result.counts["in"])
        return result

    @staticmethod
    def _count_commit(result: CleaningResult, docs: list[Document], late: dict, seconds: float) -> None:
        by_profile: dict[str, StepStats] = {}  # one index_commit row per profile, so each profile's table adds up
        for d in docs:
            by_profile.setdefault(d.meta.get("domain", ""), StepStats("index_commit", profile=d.meta.get("domain", "")))
            by_profile[d.meta.get("domain", "")].docs_in += 1
        if late:
            result.kept = [d for i, d in enumerate(docs) if i not in late]
            for i, reason in sorted(late.items()):
                stats = by_profile[docs[i].meta.get("domain", "")]
                stats.reasons[reason.split("_of:", 1)[0]] += 1
                stats.dropped += 1
                result.dropped.append(Dropped.of(docs[i], "index_commit", reason))
        for stats in by_profile.values():
            stats.seconds = seconds * stats.docs_in / max(len(docs), 1)
        result.step_stats.extend(by_profile.values())


def exclusion_records(result: CleaningResult, config: CleaningConfig) -> list[dict]:
    return exclusion_records_of(result.dropped, result.quarantined, config)


def publish_batch(client, bucket: str, *, batch_id: str, shard_dir: str, exclusions_dir: str,
                  result: CleaningResult, config: CleaningConfig, input_keys: list[str]) -> PublishedBatch:  # fmt: skip
    """A whole result written as the asset writes a streamed one: shards, the exclusion sink, the manifest last."""
    writer = BatchWriter(client, bucket, shard_dir, f"{exclusions_dir}{EXCLUSIONS_NAME}")
    writer.add_kept(result.kept)
    writer.add_excluded(exclusion_records(result, config))
    shards = writer.finish_shards()
    writer.upload_exclusions()
    manifest = ShardManifest(
        batch_id=batch_id,
        config_version=config.version,
        config_hash=config.config_hash(),
        input_keys=tuple(input_keys),
        counts=dict(result.counts),
        shards=tuple(ShardEntry(s.key, s.docs, s.raw_bytes, s.bytes, s.sha256) for s in shards),
        exclusions=writer.exclusions_key,
    )
    return write_manifest(client, bucket, shard_dir, manifest)
