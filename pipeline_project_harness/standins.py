"""Whole-batch stand-ins for tests of the cleaning chain (the product cleans through `stream.StreamingCleaner`).

- `WholeBatchPipeline`: one batch as one chunk against such an index, committing its kept documents after.
- `publish_batch` / `exclusion_records`: a whole result written as the asset writes a streamed one.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

import numpy as np

from pipeline_project.cleaning.chain.chain import CleaningPipeline, CleaningResult
from pipeline_project.cleaning.config import CleaningConfig
from pipeline_project.cleaning.dedup.memory import MemoryDedupIndex
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
        shards=tuple(
            ShardEntry(key=s.key, docs=s.docs, raw_bytes=s.raw_bytes, bytes=s.bytes, sha256=s.sha256) for s in shards
        ),
        exclusions=writer.exclusions_key,
    )
    return write_manifest(client, bucket, shard_dir, manifest)
